"""Unpacking a bundle's .tar.gz with our own extractor, never tarfile's: Python 3.9 has no
extraction filters (PEP 706), and where they exist they had bypasses until 3.9.23/3.12.11/3.13.4
(CVE-2025-4517).

After the raw pre-scan (agent/host/bundle_prescan.py), every member is checked against every
earlier one before anything is written (names inside the bundle, no hard links, devices or
FIFOs, no member under a symlink or a file, no duplicates), then each file is created relative
to a directory fd with O_NOFOLLOW|O_EXCL (agent/safeio/nofollow.py): nothing is ever created or
written through a symlink. The copy lives in a private temp directory that a signal or a later
run removes.
"""
import errno
import os
import shutil
import signal
import stat
import tarfile
import tempfile
import threading
import time
import zlib
from pathlib import Path
from typing import Any, Dict, List, Sequence, Set, Tuple

from agent.errors import BundleError
from agent.host.bundle_prescan import (
    MAX_COMPONENT_BYTES,
    MAX_MEMBERS,
    MAX_NAME_BYTES,
    MAX_UNPACKED_BYTES,
    READ_CHUNK,
    prescan,
)
from agent.safeio.nofollow import DIR_FLAGS, NEW_FILE, open_dirs


def _parts(name: str, archive: Path) -> List[str]:
    if name.startswith("/"):
        raise BundleError(f"{archive}: member {name!r} leaves the bundle")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise BundleError(f"{archive}: member {name!r} leaves the bundle")
    if len(os.fsencode(name)) >= MAX_NAME_BYTES or any(
        len(os.fsencode(p)) > MAX_COMPONENT_BYTES for p in parts
    ):
        raise BundleError(f"{archive}: member {name[:80]!r}...: name too long")
    return parts


def _members(tar: tarfile.TarFile, archive: Path) -> List[Tuple[tarfile.TarInfo, List[str]]]:
    """Every member checked, in order, against every earlier one: nothing is written yet."""
    kinds: Dict[str, str] = {}
    parents: Set[str] = set()
    total = 0
    out = []
    for count, member in enumerate(tar):
        if count >= MAX_MEMBERS:
            raise BundleError(f"{archive}: more than {MAX_MEMBERS} members")
        name = member.name
        parts = _parts(name, archive)
        if member.isdev() or member.isfifo():
            raise BundleError(f"{archive}: member {name!r} is a device or fifo")
        if member.islnk():
            raise BundleError(f"{archive}: member {name!r} is a hard link")
        if member.issym():
            kind = "symlink"
            target = member.linkname
            if len(os.fsencode(target)) >= MAX_NAME_BYTES:
                raise BundleError(f"{archive}: link {name!r}: target too long")
            # An absolute target is resolved against root/ at read time (chroot semantics,
            # agent/host/seam.py); a relative one must stay inside the bundle.
            if not target.startswith("/"):
                joined = os.path.normpath(os.path.join(os.path.dirname("/".join(parts)), target))
                if joined.startswith("..") or os.path.isabs(joined):
                    raise BundleError(f"{archive}: link {name!r} points outside the bundle")
        elif member.isdir():
            kind = "directory"
        elif member.isfile():
            kind = "file"
        else:
            raise BundleError(f"{archive}: member {name!r} has an unsupported type")
        if not parts:
            if kind == "directory":
                continue  # "./": the archive's own top directory
            raise BundleError(f"{archive}: member {name!r} has an empty name")
        key = "/".join(parts)
        if key in kinds or (key in parents and kind != "directory"):
            raise BundleError(f"{archive}: member {name!r} appears twice")
        for i in range(1, len(parts)):
            above = "/".join(parts[:i])
            if kinds.get(above, "directory") != "directory":
                raise BundleError(
                    f"{archive}: member {name!r} lies under the {kinds[above]} {above!r}"
                )
            parents.add(above)
        kinds[key] = kind
        total += max(member.size, 0)
        if total > MAX_UNPACKED_BYTES:
            raise BundleError(f"{archive}: unpacks to more than {MAX_UNPACKED_BYTES} bytes")
        out.append((member, parts))
    return out


def _open_parent(top: int, dirs: Sequence[str], name: str, archive: Path) -> int:
    """A directory fd for ``dirs`` under ``top`` (agent/safeio/nofollow.py): a symlink or a file on
    the way is refused, never followed."""
    try:
        return open_dirs(top, dirs)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise BundleError(
                f"{archive}: member {name!r} lies under {exc.filename!r}, not a directory"
            ) from None
        raise


def _write_member(tar: tarfile.TarFile, member: tarfile.TarInfo, parent: int, leaf: str,
                  archive: Path) -> None:
    name = member.name
    try:
        if member.isdir():
            try:
                os.mkdir(leaf, 0o700, dir_fd=parent)
            except FileExistsError:
                if not stat.S_ISDIR(os.stat(leaf, dir_fd=parent, follow_symlinks=False).st_mode):
                    raise BundleError(f"{archive}: member {name!r} appears twice") from None
        elif member.issym():
            os.symlink(member.linkname, leaf, dir_fd=parent)
        else:
            src = tar.extractfile(member)
            fd = os.open(leaf, NEW_FILE, 0o600, dir_fd=parent)
            with os.fdopen(fd, "wb") as out:
                if src is not None:
                    with src:
                        shutil.copyfileobj(src, out, READ_CHUNK)
                # Keep the executable bits (Host.is_executable), always readable by us.
                os.fchmod(out.fileno(), (member.mode & 0o755) | 0o600)
    except FileExistsError:
        raise BundleError(f"{archive}: member {name!r} appears twice") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise BundleError(
                f"{archive}: member {name!r} would be written through a symlink"
            ) from None
        raise


def _safe_extract(archive: Path, dest: Path) -> None:
    """Unpacks ``archive`` into the empty directory ``dest``: pre-scan, member checks, then
    every file created with openat(2)-style calls relative to a directory fd, O_NOFOLLOW and
    O_EXCL, so nothing is ever created or written through a symlink (an earlier member's
    included) and nothing is overwritten."""
    try:
        fd = os.open(archive, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise BundleError(f"{archive}: unreadable ({exc.strerror or exc})") from None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise BundleError(f"{archive}: not a regular file")
        prescan(fh, archive)
        fh.seek(0)
        try:
            tar = tarfile.open(fileobj=fh, mode="r:gz")  # noqa: SIM115 (closed below)
        except (OSError, EOFError, zlib.error, tarfile.TarError) as exc:
            raise BundleError(f"{archive}: not a readable .tar.gz ({exc})") from None
        with tar:
            try:
                members = _members(tar, archive)
            except (OSError, EOFError, zlib.error, tarfile.TarError) as exc:
                raise BundleError(f"{archive}: not a readable .tar.gz ({exc})") from None
            top = os.open(dest, DIR_FLAGS)
            try:
                for member, parts in members:
                    parent = _open_parent(top, parts[:-1], member.name, archive)
                    try:
                        _write_member(tar, member, parent, parts[-1], archive)
                    except (EOFError, zlib.error, tarfile.TarError) as exc:
                        raise BundleError(f"{archive}: not a readable .tar.gz ({exc})") from None
                    finally:
                        os.close(parent)
            finally:
                os.close(top)


# -- the temp directory ------------------------------------------------------------------
TEMP_PREFIX = "gna-bundle-"
STALE_AFTER_S = 3600.0


def _remove_stale(tmp: str) -> None:
    """Unpacked bundles a killed run left (SIGKILL cannot be caught): ours (same uid), older
    than an hour, whose process is gone. The pid is in the name: gna-bundle-<pid>-<random>."""
    now = time.time()
    try:
        entries = list(os.scandir(tmp))
    except OSError:
        return
    for entry in entries:
        if not entry.name.startswith(TEMP_PREFIX):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
            pid = int(entry.name[len(TEMP_PREFIX):].split("-", 1)[0])
        except (OSError, ValueError):
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            continue
        if now - st.st_mtime < STALE_AFTER_S or _alive(pid):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # EPERM: someone else's process by that number
    return True


class SignalGuard:
    """SIGTERM/SIGHUP, while an unpacked bundle exists, raise SystemExit (128 + signal) in the
    main thread, so the ``finally`` that removes the directory runs (Ctrl-C already raises
    KeyboardInterrupt). Only signals still at their default action are taken over (the daemon
    has its own handlers), and the previous handlers are restored on close."""

    def __init__(self) -> None:
        self._saved: List[Tuple[int, Any]] = []
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGTERM, signal.SIGHUP):
            try:
                if signal.getsignal(sig) is signal.SIG_DFL:
                    signal.signal(sig, _raise_exit)
                    self._saved.append((sig, signal.SIG_DFL))
            except (ValueError, OSError):
                continue

    def close(self) -> None:
        saved, self._saved = self._saved, []
        for sig, handler in saved:
            try:
                # Only if still ours: a handler installed meanwhile (the daemon's) stays.
                if signal.getsignal(sig) is _raise_exit:
                    signal.signal(sig, handler)
            except (ValueError, OSError):
                continue


def _raise_exit(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def unpack(src: Path) -> Tuple[str, SignalGuard]:
    """``src`` unpacked into a fresh private temp directory: (its path, the signal guard that
    keeps it removable). The caller removes the directory and closes the guard."""
    guard = SignalGuard()
    cleanup = None
    try:
        tmp = tempfile.gettempdir()
        _remove_stale(tmp)
        cleanup = tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{os.getpid()}-", dir=tmp)
        _safe_extract(src, Path(cleanup))
    except BaseException:
        if cleanup:
            shutil.rmtree(cleanup, ignore_errors=True)
        guard.close()
        raise
    return cleanup, guard
