"""Resolving a host path inside a root directory from a descriptor of that root: each component
opened ``O_PATH|O_NOFOLLOW`` relative to its parent (openat(2)), a symlink read with readlinkat
and continued from the root (an absolute target) or its parent (a relative one), ``..`` never
above the root, at most 40 hops (the kernel's limit, path_resolution(7)). Chroot semantics.

The one resolver for a tree that is not this machine: `collect` copies a file only through the
descriptor ``Resolver.open`` hands back (no component can be swapped between the check and the
read), and ``Host.real_path`` (agent/host/seam.py) maps a bundle's or a --host-root's paths
with ``Resolver.resolve``, the same walk.
"""
import errno
import os
import stat
from pathlib import Path
from typing import List, Optional, Tuple

from agent.safeio.bounded import read_bytes_capped

MAX_SYMLINK_HOPS = 40  # the kernel's own limit (ELOOP), see path_resolution(7)
MAX_FILE_BYTES = 4 * 1024 * 1024

_O_PATH = getattr(os, "O_PATH", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


class HostPathError(OSError):
    """A path that escapes the root or loops; reported like a missing file."""


class Resolver:
    """Resolves host paths inside ``root`` without ever leaving it: each component is opened
    ``O_PATH|O_NOFOLLOW`` relative to its parent's descriptor; a symlink is read with
    readlinkat and its target continued from the root (absolute) or the parent (relative);
    ``..`` never climbs above the root."""

    def __init__(self, root: Path) -> None:
        self.root_fd = os.open(str(root), _O_PATH | _O_DIRECTORY | _O_CLOEXEC)

    def close(self) -> None:
        os.close(self.root_fd)

    def open(self, host_path: str) -> Tuple[int, str]:
        """(descriptor of the final object, its canonical host path). Raises OSError."""
        fd, canonical = self._walk(host_path, missing_ok=False)
        assert fd is not None  # only a walk that may stop at a missing component has none
        return fd, canonical

    def resolve(self, host_path: str) -> str:
        """The canonical host path, as ``open`` finds it, also for a path that does not exist:
        the walk stops at the first missing component, which is kept with the components after
        it (less any "." and ".."), so opening the result fails with ENOENT as the kernel
        would and the result can never name a place above that component. Raises OSError for a
        loop (HostPathError) or a file where a directory must be."""
        fd, canonical = self._walk(host_path, missing_ok=True)
        if fd is not None:
            os.close(fd)
        return canonical

    def _walk(self, host_path: str, missing_ok: bool) -> Tuple[Optional[int], str]:
        pending = [p for p in host_path.split("/") if p]
        stack: List[Tuple[str, int]] = []  # directories below the root: (name, fd)
        hops = 0
        try:
            while pending:
                part = pending.pop(0)
                if part == ".":
                    continue
                if part == "..":
                    if stack:
                        os.close(stack.pop()[1])
                    continue
                parent = stack[-1][1] if stack else self.root_fd
                try:
                    fd = os.open(part, _O_PATH | _O_NOFOLLOW | _O_CLOEXEC, dir_fd=parent)
                except FileNotFoundError:
                    if not missing_ok:
                        raise
                    rest = [p for p in pending if p not in (".", "..")]
                    return None, "/" + "/".join([name for name, _ in stack] + [part] + rest)
                mode = os.fstat(fd).st_mode
                if stat.S_ISLNK(mode):
                    os.close(fd)
                    hops += 1
                    if hops > MAX_SYMLINK_HOPS:
                        raise HostPathError(errno.ELOOP, "too many symlinks", host_path)
                    target = os.readlink(part, dir_fd=parent)
                    if target.startswith("/"):
                        while stack:
                            os.close(stack.pop()[1])
                    pending = [p for p in target.split("/") if p] + pending
                    continue
                if pending and not stat.S_ISDIR(mode):
                    os.close(fd)
                    raise OSError(errno.ENOTDIR, "not a directory", host_path)
                stack.append((part, fd))
            if not stack:
                return os.dup(self.root_fd), "/"
            canonical = "/" + "/".join(name for name, _ in stack)
            fd = stack.pop()[1]
            return fd, canonical
        finally:
            while stack:
                os.close(stack.pop()[1])

    def canonical(self, host_path: str) -> Optional[str]:
        try:
            fd, canon = self.open(host_path)
        except OSError:
            return None
        os.close(fd)
        return canon


def read_fd(fd: int, name: str, limit: int = MAX_FILE_BYTES) -> bytes:
    """The regular file behind an O_PATH descriptor, bounded (agent/safeio/bounded.py). Reopened
    through /proc/self/fd, which opens exactly the object the descriptor holds."""
    proc = f"/proc/self/fd/{fd}"
    if not os.path.exists(proc):  # no procfs mounted: nothing is read rather than a path
        raise OSError(errno.ENOENT, "no /proc/self/fd to reopen the file", name)
    return read_bytes_capped(proc, limit)
