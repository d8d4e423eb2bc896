"""find_nvml_library over built driver roots: the Ubuntu and RHEL layouts of the GPU Operator's
driver container, an ld.so.cache-only entry, links that try to leave the root, and hostile
caches. The cache bytes are written here from glibc's sysdeps/generic/dl-cache.h (struct
cache_file_new: "glibc-ld.so.cache" "1.1", nlibs, len_strings, flags, 3 padding bytes,
extension_offset, 3 unused words = 48 bytes; struct file_entry_new: int32 flags, uint32 key,
uint32 value, uint32 osversion, uint64 hwcap = 24 bytes; strings addressed from the header's
start), not by the module under test."""
import os
import struct
from pathlib import Path
from typing import List, Tuple

import pytest

from agent.host import driver_root
from agent.host.driver_root import choose, find_nvml_library, operator_driver_root
from agent.ldcache import cache_entries
from checks.policy import ResolvedPolicy, load_policy

SONAME = "libnvidia-ml.so.1"
# dl-cache.h: FLAG_ELF_LIBC6 (3) | FLAG_X8664_LIB64 (0x0300); FLAG_AARCH64_LIB64 is 0x0a00.
X86_64 = 0x0303
AARCH64 = 0x0A03
I386 = 0x0003  # a 32-bit libc6 library: no architecture bits


def new_cache(entries: List[Tuple[int, str, str]], nlibs=None) -> bytes:
    """A glibc-ld.so.cache1.1 image: (flags, key, value) per entry."""
    header_len, entry_len = 48, 24
    strings = b""
    offsets = []
    start = header_len + entry_len * len(entries)
    for _flags, key, value in entries:
        k = start + len(strings)
        strings += key.encode() + b"\0"
        v = start + len(strings)
        strings += value.encode() + b"\0"
        offsets.append((k, v))
    count = len(entries) if nlibs is None else nlibs
    out = b"glibc-ld.so.cache1.1" + struct.pack("<II", count, len(strings))
    out += bytes([0, 0, 0, 0]) + struct.pack("<I", 0) + b"\0" * 12
    assert len(out) == header_len
    for (flags, _k, _v), (k, v) in zip(entries, offsets):
        out += struct.pack("<iIIIQ", flags, k, v, 0, 0)
    return out + strings


def put(root: Path, rel: str, data: bytes = b"\x7fELF not really") -> Path:
    path = root / rel.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def link(root: Path, rel: str, target: str) -> None:
    path = root / rel.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, path)


@pytest.fixture(autouse=True)
def x86_64(monkeypatch):
    monkeypatch.setattr(driver_root, "_machine", lambda: "x86_64")


def test_ubuntu_layout_follows_the_soname_link_to_the_versioned_file(tmp_path):
    root = tmp_path / "run/nvidia/driver"
    put(root, "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.570.86.15")
    link(root, "/usr/lib/x86_64-linux-gnu/" + SONAME, "libnvidia-ml.so.570.86.15")
    assert find_nvml_library(str(root)) == str(
        root / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.570.86.15")


def test_rhel_layout_in_usr_lib64(tmp_path):
    root = tmp_path / "driver"
    put(root, "/usr/lib64/" + SONAME)
    assert find_nvml_library(str(root)) == str(root / "usr/lib64" / SONAME)


def test_an_absolute_link_is_taken_inside_the_root(tmp_path):
    root = tmp_path / "driver"
    put(root, "/usr/lib64/libnvidia-ml.so.580.65.06")
    link(root, "/usr/lib64/" + SONAME, "/usr/lib64/libnvidia-ml.so.580.65.06")
    assert find_nvml_library(str(root)) == str(root / "usr/lib64/libnvidia-ml.so.580.65.06")


def test_the_other_architectures_multiarch_directory_is_not_searched(tmp_path):
    root = tmp_path / "driver"
    put(root, "/usr/lib/aarch64-linux-gnu/" + SONAME)
    assert find_nvml_library(str(root)) is None


@pytest.mark.parametrize("how", ["absolute", "dotdot"])
def test_a_link_escaping_the_root_is_refused(tmp_path, how):
    outside = put(tmp_path / "host", "/usr/lib64/" + SONAME)  # a real file outside the root
    root = tmp_path / "driver"
    target = str(outside) if how == "absolute" else "../../../host/usr/lib64/" + SONAME
    link(root, "/usr/lib64/" + SONAME, target)
    assert find_nvml_library(str(root)) is None


def test_an_ld_so_cache_only_entry_is_found_and_resolved_inside_the_root(tmp_path):
    root = tmp_path / "driver"
    put(root, "/opt/nvidia/lib/" + SONAME)
    put(root, "/etc/ld.so.cache", new_cache([
        (X86_64, "libc.so.6", "/usr/lib64/libc.so.6"),
        (X86_64, SONAME, "/opt/nvidia/lib/" + SONAME),
    ]))
    assert find_nvml_library(str(root)) == str(root / "opt/nvidia/lib" / SONAME)


def test_a_cache_entry_of_another_architecture_is_ignored(tmp_path):
    root = tmp_path / "driver"
    put(root, "/opt/nvidia/lib32/" + SONAME)
    put(root, "/opt/nvidia/arm/" + SONAME)
    put(root, "/etc/ld.so.cache", new_cache([
        (I386, SONAME, "/opt/nvidia/lib32/" + SONAME),
        (AARCH64, SONAME, "/opt/nvidia/arm/" + SONAME),
    ]))
    assert find_nvml_library(str(root)) is None


def test_a_cache_entry_pointing_outside_the_root_is_not_followed(tmp_path):
    outside = put(tmp_path / "host", "/opt/nv/" + SONAME)
    root = tmp_path / "driver"
    link(root, "/opt/nv", str(tmp_path / "host/opt/nv"))  # and a directory link outward
    put(root, "/etc/ld.so.cache", new_cache([
        (X86_64, SONAME, str(outside)), (X86_64, SONAME, "/opt/nv/" + SONAME)]))
    assert find_nvml_library(str(root)) is None


def test_the_old_plus_new_compat_format(tmp_path):
    root = tmp_path / "driver"
    put(root, "/srv/nv/" + SONAME)
    new = new_cache([(X86_64, SONAME, "/srv/nv/" + SONAME)])
    # "ld.so-1.7.0", nlibs=1 at offset 12, one 12-byte entry, then 8-byte alignment (28 -> 32).
    old = b"ld.so-1.7.0\0" + struct.pack("<I", 1) + struct.pack("<iII", 1, 0, 0) + b"\0" * 4
    assert len(old) == 32
    put(root, "/etc/ld.so.cache", old + new)
    assert find_nvml_library(str(root)) == str(root / "srv/nv" / SONAME)


def good_cache() -> bytes:
    return new_cache([(X86_64, SONAME, "/opt/nv/" + SONAME)])


@pytest.mark.parametrize("name,data", [
    ("empty", b""),
    ("truncated header", good_cache()[:30]),
    ("truncated entries", good_cache()[:60]),
    ("strings cut", good_cache()[:-10]),
    ("wrong magic", b"glibc-ld.so.cache1.0" + good_cache()[20:]),
    ("huge count", new_cache([(X86_64, SONAME, "/opt/nv/" + SONAME)], nlibs=0xFFFFFFFF)[:48]),
    ("old format huge count", b"ld.so-1.7.0\0" + struct.pack("<I", 0xFFFFFFFF) + b"\0" * 64),
])
def test_a_hostile_cache_finds_nothing_and_raises_nothing(tmp_path, name, data):
    root = tmp_path / "driver"
    put(root, "/opt/nv/" + SONAME)
    put(root, "/etc/ld.so.cache", data)
    assert find_nvml_library(str(root)) is None


def test_offsets_past_the_end_skip_that_entry_only(tmp_path):
    root = tmp_path / "driver"
    put(root, "/opt/nv/" + SONAME)
    data = bytearray(new_cache([
        (X86_64, SONAME, "/nowhere/" + SONAME),
        (X86_64, SONAME, "/opt/nv/" + SONAME),
    ]))
    struct.pack_into("<II", data, 48 + 4, 0xFFFFFF00, 0x7FFFFFFF)  # first entry's key, value
    put(root, "/etc/ld.so.cache", bytes(data))
    assert find_nvml_library(str(root)) == str(root / "opt/nv" / SONAME)


def test_a_huge_count_reads_only_the_entries_the_file_holds(tmp_path):
    root = tmp_path / "driver"
    put(root, "/opt/nv/" + SONAME)
    put(root, "/etc/ld.so.cache",
        new_cache([(X86_64, SONAME, "/opt/nv/" + SONAME)], nlibs=0xFFFFFFFF))
    assert find_nvml_library(str(root)) == str(root / "opt/nv" / SONAME)
    assert len(list(cache_entries(new_cache([], nlibs=0xFFFFFFFF) + b"\0" * 24 * 3))) == 0


def test_a_cache_that_is_a_directory_or_a_link_out_is_no_cache(tmp_path):
    root = tmp_path / "driver"
    put(root, "/opt/nv/" + SONAME)
    host_cache = put(tmp_path / "host", "/etc/ld.so.cache", good_cache())
    link(root, "/etc/ld.so.cache", str(host_cache))  # an absolute link: inside the root
    assert find_nvml_library(str(root)) is None
    os.unlink(root / "etc/ld.so.cache")
    (root / "etc/ld.so.cache").mkdir()
    assert find_nvml_library(str(root)) is None


def test_a_directory_named_like_the_library_is_not_it(tmp_path):
    root = tmp_path / "driver"
    (root / "usr/lib64" / SONAME).mkdir(parents=True)
    assert find_nvml_library(str(root)) is None


def test_a_missing_root_and_a_relative_root(tmp_path):
    assert find_nvml_library(str(tmp_path / "absent")) is None
    missing = choose(str(tmp_path / "absent"))
    assert missing.path is None and str(tmp_path / "absent") in missing.reason
    assert choose("run/nvidia/driver").path is None


def test_a_root_that_is_itself_a_link_gives_the_real_path(tmp_path):
    real = tmp_path / "containers/abc/rootfs"
    put(real, "/usr/lib64/" + SONAME)
    (tmp_path / "run").mkdir()
    os.symlink(real, tmp_path / "run/driver")
    found = find_nvml_library(str(tmp_path / "run/driver"))
    assert found == str(real / "usr/lib64" / SONAME)
    assert os.path.realpath(found) == found  # what the worker demands before loading it


def resolved(managed: bool, path: str, root=None) -> ResolvedPolicy:
    overrides = {"driver": {"managed_by_operator": managed}}
    if root is not None:
        overrides["operator"] = {"driver_root": root}
    return ResolvedPolicy(load_policy(2, overrides), path)


def test_the_operator_root_only_when_the_operator_owns_the_driver_on_an_operator_path():
    assert operator_driver_root(resolved(True, "operator-clusterpolicy")) == "/run/nvidia/driver"
    assert operator_driver_root(resolved(True, "operator-gpucluster", "/srv/drv")) == "/srv/drv"
    assert operator_driver_root(resolved(False, "operator-clusterpolicy")) is None
    assert operator_driver_root(resolved(True, "device-plugin")) is None
    assert operator_driver_root(resolved(True, "dra")) is None


def test_runs_library_follows_the_policy_in_force(tmp_path):
    """`run` hands the client a callable over the current generation's policy: a reload that
    makes the operator own the driver moves NVML to its root, and back."""
    from agent.cli_common import nvml_library_for

    put(tmp_path / "driver", "/usr/lib64/" + SONAME)
    current = [resolved(False, "operator-clusterpolicy", str(tmp_path / "driver"))]
    library = nvml_library_for(lambda: current[0])
    assert library() is None  # the host's own loader path
    current[0] = resolved(True, "operator-clusterpolicy", str(tmp_path / "driver"))
    assert library().path == str(tmp_path / "driver/usr/lib64" / SONAME)
    assert nvml_library_for(resolved(False, "operator-clusterpolicy")) is None  # check, collect
