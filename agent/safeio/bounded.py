"""Bounded reads: the one way the agent reads a host file, live or in a bundle, and a file it
was handed (a config, a web-config, a state file).

Why not ``open().read(N)``:
- procfs sysctl files refuse a single read larger than the kernel's kmalloc limit since Linux
  5.8 (``proc_sys_call_handler`` returns ENOMEM), so an 8 MiB read of
  ``/proc/sys/kernel/random/boot_id`` returns nothing on every current distribution. We read
  in page-sized chunks until EOF, as ``cat`` does.
- a hostile tree (a bundle, ``--host-root``) can point a path at ``/dev/zero``, a FIFO or a
  socket: only regular files are read (procfs and sysfs attributes are regular files), opened
  non-blocking so a FIFO never blocks the open.
- nothing unbounded is read: a file larger than its cap raises :class:`ReadCapExceeded`, which
  names the file and the cap (never a silent cut).
"""
import errno
import os
import stat
from typing import Union

CHUNK = 4096  # one page: the size every procfs/sysfs handler serves without complaint
DEFAULT_CAP = 4 * 1024 * 1024  # no file a check reads is this large (CDI specs are ~100 KiB)
CONFIG_CAP = 1024 * 1024  # agent configs, web-configs, kubeconfigs, state files

PathLike = Union[str, "os.PathLike[str]"]


class ReadCapExceeded(OSError):
    """A file larger than the cap its reader allows. An OSError, so callers that treat an
    unreadable file as unknown keep doing so; the message names the file and the cap."""

    def __init__(self, path: PathLike, cap: int) -> None:
        super().__init__(errno.EFBIG, f"larger than the {cap}-byte cap", os.fspath(path))
        self.cap = cap


class NotARegularFile(OSError):
    def __init__(self, path: PathLike, kind: str) -> None:
        super().__init__(errno.EINVAL, f"not a regular file ({kind})", os.fspath(path))


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISDIR, "directory"),
    ):
        if test(mode):
            return name
    return "special file"


def read_bytes_capped(path: PathLike, cap: int = DEFAULT_CAP, nofollow: bool = False) -> bytes:
    """The whole file, read in page-sized chunks to EOF. Raises OSError when absent or
    unreadable, NotARegularFile for devices/FIFOs/sockets/directories, ReadCapExceeded past
    ``cap`` bytes. ``nofollow`` refuses a symlink as the last component (O_NOFOLLOW)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if nofollow:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotARegularFile(path, _kind(st.st_mode))
        chunks = []
        total = 0
        while True:
            # At most one byte past the cap, so an oversize file is detected, never buffered.
            want = min(CHUNK if st.st_size <= CHUNK else 64 * 1024, cap + 1 - total)
            if want <= 0:
                raise ReadCapExceeded(path, cap)
            block = os.read(fd, want)
            if not block:
                break
            chunks.append(block)
            total += len(block)
            if total > cap:
                raise ReadCapExceeded(path, cap)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_text_capped(path: PathLike, cap: int = DEFAULT_CAP, nofollow: bool = False) -> str:
    """As read_bytes_capped, decoded as UTF-8 with undecodable bytes replaced (host files are
    not ours to trust to be UTF-8; one bad byte must never raise)."""
    return read_bytes_capped(path, cap, nofollow).decode("utf-8", errors="replace")
