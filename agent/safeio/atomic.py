"""Atomic file replacement: the one way the agent writes a file another reader may see
(the sticky state, the node_exporter textfile, the NFD feature file).

A temp file is written, fsync'd and renamed over the target, then the directory is fsync'd:
rename(2) is atomic, and the two fsyncs make a crash leave the old or the new file, never a
torn one (the sequence the ext4 and XFS maintainers recommend; see rename(2), fsync(2)).
"""
import contextlib
import errno
import os
from typing import Optional


def fsync_dir(path: str) -> None:
    """Persist a directory entry change (after a rename)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError as exc:  # some filesystems refuse fsync on a directory
        if exc.errno not in (errno.EINVAL, errno.EBADF):
            raise
    finally:
        os.close(fd)


def write_atomic(
    path: str, data: bytes, mode: int = 0o644, prefix: str = ".gpu-node-agent.",
    tmp_dir: Optional[str] = None,
) -> str:
    """Replace ``path`` with ``data``. ``tmp_dir`` (same filesystem) keeps the temp file out
    of a directory whose every file a reader consumes (NFD's features.d)."""
    import tempfile  # here: a one-shot `check` never writes, and tempfile brings shutil/random

    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=tmp_dir or directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(directory)
    return path
