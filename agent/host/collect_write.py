"""Writing `collect`'s bundle: never through a link, never over anything.

The bundle is staged in a fresh 0700 directory beside the output; every file is created
``O_EXCL|O_NOFOLLOW`` mode 0600 (0700 for an executable placeholder) under directories opened
with ``O_NOFOLLOW`` (agent/safeio/nofollow.py), so a link the bundle itself holds (recorded from
the host) is never written through. A .tar.gz is written to a random ``O_EXCL`` name (mkstemp,
0600) in the target directory, then linked into place without replacing anything (link(2)
fails with EEXIST).
"""
import errno
import os
import stat
import tarfile
import tempfile
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from agent.errors import OutputError
from agent.safeio.nofollow import DIR_FLAGS, NEW_FILE, open_dirs


def _parts(host_path: str) -> List[str]:
    return [p for p in host_path.split("/") if p and p not in (".", "..")]


class Tree:
    """The bundle's root/ (or the bundle itself): every directory opened O_NOFOLLOW from the
    top, every file created O_EXCL|O_NOFOLLOW, so a symlink the bundle holds (recorded from
    the host) is never written through."""

    def __init__(self, top: Path) -> None:
        self.top = top

    def _parent(self, parts: Sequence[str]) -> Optional[int]:
        top = os.open(str(self.top), DIR_FLAGS)
        try:
            return open_dirs(top, parts)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                return None  # a link or a file where a directory would go: not written
            raise
        finally:
            os.close(top)

    def _open_parent(self, host_path: str) -> Optional[Tuple[int, str]]:
        """A descriptor on host_path's parent (made under top, never through a link) and the
        last component; None for an empty path or a parent that cannot be made. The caller
        closes the descriptor."""
        parts = _parts(host_path)
        if not parts:
            return None
        fd = self._parent(parts[:-1])
        return None if fd is None else (fd, parts[-1])

    def write(self, host_path: str, data: bytes, mode: int = 0o600) -> bool:
        opened = self._open_parent(host_path)
        if opened is None:
            return False
        fd, name = opened
        try:
            out = os.open(name, NEW_FILE, mode, dir_fd=fd)
        except FileExistsError:
            return False
        finally:
            os.close(fd)
        with os.fdopen(out, "wb") as f:
            f.write(data)
        return True

    def symlink(self, host_path: str, target: str) -> bool:
        opened = self._open_parent(host_path)
        if opened is None:
            return False
        fd, name = opened
        try:
            os.symlink(target, name, dir_fd=fd)
            return True
        except FileExistsError:
            return False
        finally:
            os.close(fd)

    def mkdir(self, host_path: str) -> None:
        fd = self._parent(_parts(host_path))
        if fd is not None:
            os.close(fd)

    def exists(self, host_path: str) -> bool:
        return os.path.lexists(self.top.joinpath(*_parts(host_path)))


def write_new(path: Path, data: str) -> None:
    fd = os.open(str(path), NEW_FILE, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(data)


def lock_down(top: Path) -> None:
    """Directories 0700, files 0600 (0700 if executable); links are left alone."""
    for dirpath, dirnames, filenames in os.walk(str(top)):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            if stat.S_ISDIR(st.st_mode):
                os.chmod(path, 0o700)
            elif stat.S_ISREG(st.st_mode):
                os.chmod(path, 0o700 if st.st_mode & 0o100 else 0o600)
    os.chmod(str(top), 0o700)


def check_target(target: Path, as_tar: bool) -> None:
    if as_tar:
        if os.path.lexists(target):
            raise OutputError(f"{target}: exists; collect never overwrites a file")
        return
    if os.path.islink(target) or (os.path.lexists(target) and not target.is_dir()):
        raise OutputError(f"{target}: exists and is not a directory (choose another -o)")
    if target.is_dir() and any(target.iterdir()):
        raise OutputError(f"{target}: directory is not empty (choose another -o)")


def _tar_filter(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if info.isdir():
        info.mode = 0o700
    elif info.isfile():
        info.mode = 0o700 if info.mode & 0o100 else 0o600
    return info


def write_tar(bundle: Path, target: Path) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".gna-bundle-", suffix=".partial", dir=str(target.parent))
    try:
        with os.fdopen(fd, "wb") as raw:
            with tarfile.open(fileobj=raw, mode="w:gz") as tar:
                for entry in sorted(bundle.iterdir()):
                    tar.add(str(entry), arcname=entry.name, filter=_tar_filter)
            raw.flush()
            os.fsync(raw.fileno())
        try:
            os.link(tmp, str(target))  # never replaces: EEXIST if someone got there first
        except FileExistsError:
            raise OutputError(f"{target}: exists; collect never overwrites a file") from None
        except OSError:  # a filesystem without hard links
            if os.path.lexists(target):
                raise OutputError(f"{target}: exists; collect never overwrites a file") from None
            os.rename(tmp, str(target))
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
