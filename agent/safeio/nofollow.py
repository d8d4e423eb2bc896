"""Making directories and files under a directory without ever following a symlink: each
component opened relative to its parent's descriptor with O_NOFOLLOW (openat(2)), new files
created O_EXCL. The bundle unpacker and `collect`'s bundle writer both write into trees whose
earlier entries may be symlinks (an archive member, a link recorded from the host)."""
import os
from typing import Sequence

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def open_dirs(top: int, dirs: Sequence[str]) -> int:
    """A descriptor on ``top``/``dirs``..., each missing directory made 0700. A symlink or a
    file on the way raises OSError (ELOOP or ENOTDIR): it is never followed. The caller closes
    the descriptor; ``top`` stays open."""
    fd = os.dup(top)
    try:
        for comp in dirs:
            try:
                nfd = os.open(comp, DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                os.mkdir(comp, 0o700, dir_fd=fd)
                nfd = os.open(comp, DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nfd
        return fd
    except BaseException:
        os.close(fd)
        raise
