"""The GPU Operator's driver root as hostile input (agent/host/driver_root.py): a FIFO or a
device where the library or /etc/ld.so.cache should be (opening either for reading would block
or touch hardware; the resolver opens O_PATH and fstat says not a regular file), a cache entry
that names a FIFO, and a cache string with no NUL before the end of the file. A SIGALRM bounds
each test so a regression is a failure, not a hung suite."""
import os
import signal
import struct
from pathlib import Path

import pytest

from agent.host import driver_root
from agent.host.driver_root import find_nvml_library
from agent.ldcache import cache_entries

SONAME = "libnvidia-ml.so.1"
X86_64 = 0x0303  # dl-cache.h: FLAG_ELF_LIBC6 | FLAG_X8664_LIB64


@pytest.fixture(autouse=True)
def bounded(monkeypatch):
    monkeypatch.setattr(driver_root, "_machine", lambda: "x86_64")

    def hung(signum, frame):
        raise AssertionError("blocked on a FIFO or device")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def _cache(key: bytes, value: bytes) -> bytes:
    start = 48 + 24
    out = b"glibc-ld.so.cache1.1" + struct.pack("<II", 1, len(key) + len(value)) + b"\0" * 20
    return out + struct.pack("<iIIIQ", X86_64, start, start + len(key), 0, 0) + key + value


def _fifo(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)


def test_a_fifo_where_the_library_and_the_cache_should_be_is_not_found(tmp_path):
    _fifo(tmp_path / "usr/lib64" / SONAME)
    _fifo(tmp_path / "etc/ld.so.cache")
    assert find_nvml_library(str(tmp_path)) is None


def test_a_cache_entry_naming_a_fifo_is_not_found(tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/ld.so.cache").write_bytes(_cache(b"libnvidia-ml.so.1\0",
                                                      b"/opt/nv/libnvidia-ml.so.1\0"))
    _fifo(tmp_path / "opt/nv" / SONAME)
    assert find_nvml_library(str(tmp_path)) is None


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero to link to")
def test_a_link_to_a_device_is_taken_inside_the_root_and_not_found(tmp_path):
    # /dev/zero resolves under the root (chroot semantics), where there is no such file.
    (tmp_path / "usr/lib64").mkdir(parents=True)
    os.symlink("/dev/zero", tmp_path / "usr/lib64" / SONAME)
    assert find_nvml_library(str(tmp_path)) is None


def test_a_cache_string_without_its_nul_is_skipped():
    data = _cache(b"libnvidia-ml.so.1\0", b"/usr/lib64/libnvidia-ml.so.1")  # cut: no NUL
    assert list(cache_entries(data, "x86_64")) == []
    whole = _cache(b"libnvidia-ml.so.1\0", b"/usr/lib64/libnvidia-ml.so.1\0")
    assert list(cache_entries(whole, "x86_64")) == [(SONAME, "/usr/lib64/libnvidia-ml.so.1")]
