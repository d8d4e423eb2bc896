"""Reading glibc's ld.so.cache: which file the dynamic loader maps a soname to.

Pure bytes in, (soname, path) pairs out, in the core so that the NVML loader
(agent/host/driver_root.py) and the checks (checks/operator/state.py) read a driver root's
cache the same way (ld.so(8): the loader consults /etc/ld.so.cache; ldconfig(8) writes it).

The format is glibc's "new" one (glibc sysdeps/generic/dl-cache.h: CACHEMAGIC_NEW
"glibc-ld.so.cache", CACHE_VERSION "1.1"; struct cache_file_new, a 48-byte header, then
`nlibs` struct file_entry_new of 24 bytes: int32 flags, uint32 key, uint32 value, uint32
osversion, uint64 hwcap; key and value are string offsets from the start of the new header),
alone (what ldconfig writes since glibc 2.32) or after the old "ld.so-1.7.0" table (16-byte
header, 12-byte entries, the new table 8-byte aligned after them). The file is hostile input:
the caller reads it bounded; here at most MAX_CACHE_ENTRIES entries are looked at, and an entry
whose string offset lies outside the file is ignored, never followed.
"""
import os
import struct
from typing import Iterator, Optional, Tuple

LD_SO_CACHE = "/etc/ld.so.cache"
CACHE_CAP = 8 * 1024 * 1024  # a full distribution's cache is ~100 KiB
MAX_CACHE_ENTRIES = 1 << 16
OLD_MAGIC = b"ld.so-1.7.0"
NEW_MAGIC = b"glibc-ld.so.cache1.1"
NEW_HEADER = struct.Struct("<20sII")  # magic+version, nlibs, len_strings (then 24 bytes more)
NEW_HEADER_SIZE = 48
NEW_ENTRY = struct.Struct("<iIIIQ")  # flags, key, value, osversion, hwcap
OLD_HEADER_SIZE, OLD_ENTRY_SIZE = 16, 12
# dl-cache.h: FLAG_ELF_LIBC6 in the type bits (FLAG_TYPE_MASK 0x00ff); the architecture bits
# (FLAG_REQUIRED_MASK 0xff00) of a 64-bit library: FLAG_X8664_LIB64, FLAG_AARCH64_LIB64.
FLAG_TYPE_MASK, FLAG_REQUIRED_MASK, FLAG_ELF_LIBC6 = 0x00FF, 0xFF00, 0x0003
ARCH_FLAGS = {"x86_64": 0x0300, "aarch64": 0x0A00}


def _machine() -> str:
    # platform.machine() is os.uname().machine on Linux (Lib/platform.py uname()); platform
    # itself is not imported for it (about 1 ms of a one-shot `check`).
    return os.uname().machine


def cache_entries(data: bytes, machine: Optional[str] = None) -> Iterator[Tuple[str, str]]:
    """(soname, path) for each library of this machine's architecture in an ld.so.cache image.
    Nothing for a file in no known format; an entry pointing outside the file is skipped."""
    base = 0
    if data.startswith(OLD_MAGIC) and len(data) >= OLD_HEADER_SIZE:
        (old_count,) = struct.unpack_from("<I", data, 12)
        if old_count > MAX_CACHE_ENTRIES:
            return
        base = (OLD_HEADER_SIZE + old_count * OLD_ENTRY_SIZE + 7) & ~7
    if len(data) < base + NEW_HEADER_SIZE or data[base:base + len(NEW_MAGIC)] != NEW_MAGIC:
        return
    _magic, count, _strings = NEW_HEADER.unpack_from(data, base)
    arch = ARCH_FLAGS.get(machine or _machine())
    first = base + NEW_HEADER_SIZE
    fits = (len(data) - first) // NEW_ENTRY.size
    for i in range(min(count, fits, MAX_CACHE_ENTRIES)):
        flags, key, value, _os, _hwcap = NEW_ENTRY.unpack_from(data, first + i * NEW_ENTRY.size)
        if flags & FLAG_TYPE_MASK != FLAG_ELF_LIBC6 or flags & FLAG_REQUIRED_MASK != arch:
            continue
        name, path = _string(data, base + key), _string(data, base + value)
        if name is not None and path is not None:
            yield name, path


def _string(data: bytes, offset: int) -> Optional[str]:
    """The NUL-terminated string at ``offset``; None when it starts or ends outside the file."""
    if offset >= len(data):
        return None
    end = data.find(b"\0", offset, offset + 4096)
    if end < 0:
        return None
    return data[offset:end].decode("utf-8", "replace")
