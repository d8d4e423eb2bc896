"""The operator's driver counts as present when its libnvidia-ml.so.1 is only in a directory
the driver root's own ld.so.cache names (as the NVML loader finds it: agent/host/driver_root.py),
and collect carries that cache byte for byte so a bundle judges the same.

The cache bytes are written here from glibc's sysdeps/generic/dl-cache.h (struct
cache_file_new: "glibc-ld.so.cache" "1.1", nlibs, len_strings, then 28 more header bytes = 48;
struct file_entry_new: int32 flags, uint32 key, uint32 value, uint32 osversion, uint64 hwcap =
24 bytes; string offsets from the header's start; flags FLAG_ELF_LIBC6 3 | FLAG_X8664_LIB64
0x0300 or FLAG_AARCH64_LIB64 0x0a00), not by the module under test.
"""
import datetime
import os
import struct

from agent.config import Config
from agent.host.bundle import load_bundle
from agent.host.collect import collect
from agent.host.seam import Host
from checks.driver.driver_branch import DRIVER_BRANCH
from checks.driver.driver_library_match import DRIVER_LIBRARY_MATCH
from checks.driver.driver_loaded import DRIVER_LOADED
from checks.nvml_responsive import NVML_RESPONSIVE
from checks.operator.gpu_operator import GPU_OPERATOR
from checks.operator.state import driver_waiting
from checks.policy import ResolvedPolicy, load_policy

X86_64, AARCH64 = 0x0303, 0x0A03
ROOT = "/run/nvidia/driver"
LIB = "/usr/lib64/nvidia/libnvidia-ml.so.1"  # not one of agent/driver_layout.py's LIB_DIRS


def new_cache(entries):
    start = 48 + 24 * len(entries)
    strings, offsets = b"", []
    for _flags, key, value, *_hwcap in entries:
        k = start + len(strings)
        strings += key.encode() + b"\0"
        v = start + len(strings)
        strings += value.encode() + b"\0"
        offsets.append((k, v))
    out = b"glibc-ld.so.cache1.1" + struct.pack("<II", len(entries), len(strings)) + b"\0" * 20
    for (flags, _k, _v, *hwcap), (k, v) in zip(entries, offsets):
        out += struct.pack("<iIIIQ", flags, k, v, 0, hwcap[0] if hwcap else 0)
    return out + strings


def policy():
    return ResolvedPolicy(load_policy(2, {"driver": {"managed_by_operator": True}}),
                          "operator-clusterpolicy", today=datetime.date(2026, 12, 1),
                          settings=Config().model_dump())


def put(root, path, data=b""):
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    return target


def host_tree(tmp_path, cache_entries, lib=True):
    """The module loaded long ago (past the 900 s grace), the root's library only under
    /usr/lib64/nvidia (a soname link to the versioned file, as ldconfig leaves it)."""
    root = tmp_path / "host"
    put(root, "/proc/driver/nvidia/version",
        b"NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.173.02  Tue Jun 23 2026\n")
    put(root, "/proc/uptime", b"5000.0 1.0\n")
    if lib:
        put(root, ROOT + "/usr/lib64/nvidia/libnvidia-ml.so.580.173.02", b"\x7fELF")
        os.symlink("libnvidia-ml.so.580.173.02", root / (ROOT + LIB).lstrip("/"))
    if cache_entries is not None:
        put(root, ROOT + "/etc/ld.so.cache", new_cache(cache_entries))
    return root


def test_a_library_only_the_roots_cache_names_is_present(tmp_path):
    root = host_tree(tmp_path, [(X86_64, "libc.so.6", "/usr/lib64/libc.so.6"),
                                (X86_64, "libnvidia-ml.so.1", LIB)])
    assert driver_waiting(Host(root), policy()) is None
    out = DRIVER_LOADED.run(Host(root), policy())
    # Past the waiting: the next thing it lacks is the device-node fact.
    assert out.code == "dev-nodes-unknown"


def test_an_aarch64_cache_counts_too(tmp_path):
    # A bundle from an aarch64 host judged on any machine.
    root = host_tree(tmp_path, [(AARCH64, "libnvidia-ml.so.1", LIB)])
    assert driver_waiting(Host(root), policy()) is None


def test_without_the_cache_the_same_root_is_late(tmp_path):
    root = host_tree(tmp_path, None)
    out = DRIVER_LOADED.run(Host(root), policy())
    assert (str(out.status), out.code) == ("fail", "operator-driver-late")
    assert "no libnvidia-ml under /run/nvidia/driver" in out.summary


def test_an_entry_that_does_not_exist_under_the_root_or_climbs_out_is_not_present(tmp_path):
    # The cache names the file, the host's own / holds it, the driver root does not; and an
    # entry with ".." that would reach the host's copy from the root.
    root = host_tree(tmp_path, [(X86_64, "libnvidia-ml.so.1", LIB),
                                (X86_64, "libnvidia-ml.so.1",
                                 "/../../../usr/lib64/nvidia/libnvidia-ml.so.1")], lib=False)
    put(root, LIB, b"\x7fELF")
    waiting = driver_waiting(Host(root), policy())
    assert waiting is not None and waiting.missing == "no libnvidia-ml under /run/nvidia/driver"


def test_another_soname_or_a_garbage_cache_is_not_present(tmp_path):
    root = host_tree(tmp_path, [(X86_64, "libnvidia-ml.so.2", LIB)])
    assert driver_waiting(Host(root), policy()) is not None
    put(root, ROOT + "/etc/ld.so.cache", b"\xff" * 4096)
    assert driver_waiting(Host(root), policy()) is not None


def test_collect_carries_the_cache_byte_for_byte_and_the_bundle_judges_the_same(tmp_path):
    # A hwcap word with high bits set (glibc-hwcaps subdirectory entries carry them): bytes
    # that are not UTF-8, which a text copy would replace.
    entries = [(X86_64, "libfoo.so.1", "/usr/lib64/libfoo.so.1", 0xC0FFEE80_00000000),
               (X86_64, "libnvidia-ml.so.1", LIB)]
    cache = new_cache(entries)
    root = host_tree(tmp_path, entries)
    checks = (DRIVER_LOADED, DRIVER_BRANCH, DRIVER_LIBRARY_MATCH, NVML_RESPONSIVE, GPU_OPERATOR)
    for check in checks:
        assert ROOT + "/etc/ld.so.cache" in check.reads, check.id
    out = collect(Host(root), checks, str(tmp_path / "bundle"))
    assert (out / ("root" + ROOT + "/etc/ld.so.cache")).read_bytes() == cache
    # The library is a placeholder: the soname link and an empty versioned file.
    assert os.readlink(out / ("root" + ROOT + LIB)) == "libnvidia-ml.so.580.173.02"
    assert (out / ("root" + ROOT + "/usr/lib64/nvidia/libnvidia-ml.so.580.173.02")
            ).read_bytes() == b""
    source = load_bundle(str(out))
    try:
        assert driver_waiting(source.host, policy()) is None
        assert DRIVER_LOADED.run(source.host, policy()).code == "dev-nodes-unknown"
    finally:
        source.close()
