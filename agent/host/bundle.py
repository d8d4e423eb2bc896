"""Bundles: a captured Host in one format for fixtures, support cases and the README demo.

Layout (docs/bundle-format.md): bundle.yaml, root/, commands.yaml, gpus.json, host.json,
kmsg.log. A bundle is hostile input (a support engineer runs `check --bundle` on a customer's
file; `run --bundle` runs as root), so:

- a `.tar.gz` is unpacked by our own extractor, never tarfile's: Python 3.9 has no extraction
  filters (PEP 706), and where they exist they had bypasses until 3.9.23/3.12.11/3.13.4
  (CVE-2025-4517). Before tarfile parses a header, a raw pre-scan of the gzip stream bounds the
  decompressed size, the member count, every header and every PAX/GNU long-name header
  (tarfile's quadratic PAX parser, CVE-2024-6232, is never reached with a big one). Files are
  then created relative to directory fds with O_NOFOLLOW|O_EXCL: nothing is ever created
  through a symlink, duplicates and members under a symlink are refused;
- top-level entries must be regular files and root/ a real directory (lstat), for directory
  bundles too, and are read with size caps (TOP_CAPS);
- the Host is built with ``live=False``: a bundle is never judged as this machine.
"""
import errno
import os
import re
import shutil
import signal
import stat
import tarfile
import tempfile
import threading
import time
import zlib
from pathlib import Path
from typing import Any, BinaryIO, Dict, List, Mapping, Optional, Sequence, Set, Tuple, Union

import yaml

from agent.errors import BundleError
from agent.host.seam import CommandResult, Host, StaticFacts, StaticGpus
from agent.safeio import jsonio
from agent.safeio.bounded import NotARegularFile, ReadCapExceeded, read_bytes_capped
from agent.safeio.nofollow import DIR_FLAGS, NEW_FILE, open_dirs
from agent.safeio.yamlio import YamlError, safe_load

__all__ = ["BundleError", "load_bundle"]

FORMAT_VERSION = 1
MAX_MEMBERS = 20000
MAX_UNPACKED_BYTES = 512 * 1024 * 1024
TOP_FILES = ("bundle.yaml", "commands.yaml", "gpus.json", "host.json", "kmsg.log")
# Read caps for the top-level files. Whatever is parsed must fit the unit's 128 MiB
# (systemd/gpu-node-agent.service MemoryMax) with the agent itself: collect writes a few KiB of
# metadata, command output of at most a few hundred KiB, and kmsg.log is the kernel ring
# buffer (distributions build with CONFIG_LOG_BUF_SHIFT 17-18: 128-256 KiB, more with many
# CPUs). A line costs ~60 bytes of Python object beside its text: a 16 MiB kmsg.log of
# 100-byte lines took the check to 110 MiB peak RSS here, so 4 MiB and 100,000 lines.
TOP_CAPS = {
    "bundle.yaml": 64 * 1024,
    "commands.yaml": 8 * 1024 * 1024,
    "gpus.json": 4 * 1024 * 1024,
    "host.json": 4 * 1024 * 1024,
    "kmsg.log": 4 * 1024 * 1024,
}
MAX_KMSG_LINES = 100_000


class RecordedCommands:
    """Replays commands.yaml. An argv that was not recorded is 'not recorded' (rc -1),
    never a fall-through to the real machine."""

    def __init__(self, records: Sequence[Mapping[str, Any]], origin: str) -> None:
        self._by_argv: Dict[Tuple[str, ...], CommandResult] = {}
        for i, rec in enumerate(records):
            where = f"{origin}: entry {i}"
            if not isinstance(rec, Mapping):
                raise BundleError(f"{where}: expected a mapping with argv, rc, stdout, stderr")
            argv = rec.get("argv")
            if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
                raise BundleError(f"{where}: field 'argv' must be a non-empty list of strings")
            rc = rec.get("rc", 0)
            if not isinstance(rc, int):
                raise BundleError(f"{where}: field 'rc' must be an integer")
            out, err = rec.get("stdout", ""), rec.get("stderr", "")
            if not isinstance(out, str) or not isinstance(err, str):
                raise BundleError(f"{where}: fields 'stdout' and 'stderr' must be strings")
            key = tuple(argv)
            self._by_argv[key] = CommandResult(
                key, rc, out, err, timed_out=bool(rec.get("timed_out", False))
            )

    def run(self, argv: Sequence[str], timeout: float) -> CommandResult:
        key = tuple(argv)
        found = self._by_argv.get(key)
        if found is None:
            return CommandResult(key, -1, "", "not recorded in this bundle", not_recorded=True)
        return found


# -- the archive -------------------------------------------------------------------------
# Bounds on what a .tar.gz may hold. The pre-scan enforces them on the raw gzip stream before
# tarfile parses a single header; the member pass and the extraction enforce them again.
MAX_STREAM_BYTES = MAX_UNPACKED_BYTES + 64 * 1024 * 1024  # decompressed bytes read at most
MAX_EXT_HEADER = 64 * 1024  # one PAX 'x'/'g' header (ours are < 1 KiB)
MAX_NAME_BYTES = 4096  # PATH_MAX (limits.h), longer names cannot be created anyway
MAX_COMPONENT_BYTES = 255  # NAME_MAX
MAX_EXT_CHAIN = 8  # extended headers in a row before a member (tarfile recurses once each)
# tarfile < 3.9.20/3.10.15/3.11.10/3.12.6 searches a PAX header with re.search(rb"\d+ hdrcharset=")
# (CVE-2024-6232, https://github.com/python/cpython/issues/121285): quadratic in the length of
# a run of digits. A run longer than this in a PAX header is refused (mtimes have 10 + 9).
MAX_PAX_DIGIT_RUN = 64
BLOCK = 512
_READ = 64 * 1024
_DIGITS = re.compile(rb"[0-9]{%d,}" % (MAX_PAX_DIGIT_RUN + 1))

TEMP_PREFIX = "gna-bundle-"
STALE_AFTER_S = 3600.0

# tarfile type flags (POSIX.1-2001 ustar, GNU tar's 'L'/'K').
_REG, _AREG, _DIR, _SYM = b"0", b"\0", b"5", b"2"
_PAX, _PAX_GLOBAL, _LONGNAME, _LONGLINK = b"x", b"g", b"L", b"K"
_HARD, _DEVS = b"1", (b"3", b"4", b"6")


class _Inflater:
    """The decompressed gzip stream, read in bounded pieces: never more than ``cap`` bytes in
    all (a gzip bomb stops there), never more than one piece in memory."""

    def __init__(self, fh: BinaryIO, cap: int, archive: Path) -> None:
        self._fh = fh
        self._cap = cap
        self._archive = archive
        self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)  # gzip framing (RFC 1952)
        self._buf = bytearray()
        self._eof = False
        self.total = 0

    def _more(self) -> None:
        if self._d.eof:  # a gzip member ended: another may follow (RFC 1952 section 2.2)
            rest = self._d.unused_data or self._fh.read(_READ)
            if not rest:
                self._eof = True
                return
            self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            src = rest
        else:
            src = self._d.unconsumed_tail or self._fh.read(_READ)
            if not src:
                raise BundleError(f"{self._archive}: the gzip stream is truncated")
        try:
            out = self._d.decompress(src, _READ)
        except zlib.error as exc:
            raise BundleError(f"{self._archive}: not a readable .tar.gz ({exc})") from None
        self.total += len(out)
        if self.total > self._cap:
            raise BundleError(
                f"{self._archive}: decompresses to more than {self._cap} bytes (a gzip bomb?)"
            )
        self._buf += out

    def read(self, n: int) -> bytes:
        while len(self._buf) < n and not self._eof:
            self._more()
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    def skip(self, n: int) -> None:
        while n > 0:
            got = len(self.read(min(n, _READ)))
            if got == 0:
                return  # truncated: tarfile reports it on the member pass
            n -= got


def _number(field: bytes) -> int:
    """A tar number field as tarfile's nti() reads it: octal text, or base-256 when the first
    byte is 0x80 (0xff, negative, is refused here)."""
    if field[:1] == b"\x80":
        return int.from_bytes(field[1:], "big")
    if field[:1] == b"\xff":
        raise ValueError("negative number")
    text = field.split(b"\0", 1)[0].strip()
    return int(text.decode("ascii"), 8) if text else 0


def _checksum_ok(block: bytes) -> bool:
    try:
        want = _number(block[148:156])
    except ValueError:
        return False
    unsigned = 256 + sum(block[:148]) + sum(block[156:])
    signed = 256 + sum(b - 256 if b > 127 else b for b in block[:148] + block[156:])
    return want in (unsigned, signed)


def _check_pax(body: bytes, padding: bytes, archive: Path) -> None:
    """A PAX extended header (POSIX.1-2001 pax(1), "pax Extended Header"): records
    ``"%d %s=%s\\n" % (length, keyword, value)`` that fill the body exactly, padding all NUL.
    That is the shape tarfile's regex walk reads in linear time; the keywords that would make
    tarfile's idea of the next member's data differ from ours are refused."""
    where = f"{archive}: PAX header"
    if padding.strip(b"\0"):
        raise BundleError(f"{where}: data after its records")
    run = _DIGITS.search(body)
    if run is not None:
        raise BundleError(f"{where}: a run of more than {MAX_PAX_DIGIT_RUN} digits")
    pos = 0
    while pos < len(body):
        space = body.find(b" ", pos, pos + 12)
        field = body[pos:space] if space > pos else b""
        if not field.isdigit():
            raise BundleError(f"{where}: malformed record at byte {pos}")
        length = int(field)
        record = body[space + 1:pos + length]
        if length <= len(field) + 1 or pos + length > len(body) or not record.endswith(b"\n"):
            raise BundleError(f"{where}: malformed record at byte {pos}")
        key, eq, value = record[:-1].partition(b"=")
        if not eq or not key:
            raise BundleError(f"{where}: malformed record at byte {pos}")
        if key == b"size" or key.startswith(b"GNU.sparse"):
            raise BundleError(f"{where}: keyword {key.decode('ascii', 'replace')!r} is refused")
        if key in (b"path", b"linkpath") and len(value) >= MAX_NAME_BYTES:
            raise BundleError(f"{where}: a {key.decode()} longer than {MAX_NAME_BYTES} bytes")
        pos += length


def _prescan(fh: BinaryIO, archive: Path) -> None:
    """Walks every tar header in the gzip stream before tarfile sees any of them: checksum,
    type (regular file, directory, symlink, PAX, GNU long name only), sizes, extended headers
    capped, member count and data total capped. Stops where tarfile stops (the first all-zero
    block)."""
    src = _Inflater(fh, MAX_STREAM_BYTES, archive)
    members = 0
    data_total = 0
    chain = 0
    while True:
        block = src.read(BLOCK)
        if not block:
            if members == 0 and chain == 0:
                raise BundleError(f"{archive}: an empty archive")
            break  # no end-of-archive blocks: tarfile stops here too
        if len(block) < BLOCK:
            raise BundleError(f"{archive}: truncated tar header")
        if block.count(0) == BLOCK:
            if chain:
                raise BundleError(f"{archive}: an extended header without its member")
            break
        if not _checksum_ok(block):
            raise BundleError(f"{archive}: bad tar header checksum at member {members + 1}")
        kind = block[156:157]
        name = block[0:100].split(b"\0", 1)[0]
        try:
            size = _number(block[124:136])
        except ValueError:
            raise BundleError(f"{archive}: bad size field at member {members + 1}") from None
        shown = name.decode("utf-8", "replace")[:80]
        if kind in (_PAX, _PAX_GLOBAL, _LONGNAME, _LONGLINK):
            chain += 1
            if chain > MAX_EXT_CHAIN:
                raise BundleError(f"{archive}: more than {MAX_EXT_CHAIN} extended headers in a row")
            cap = MAX_EXT_HEADER if kind in (_PAX, _PAX_GLOBAL) else MAX_NAME_BYTES
            if size > cap:
                what = "PAX header" if kind in (_PAX, _PAX_GLOBAL) else "GNU long name"
                raise BundleError(f"{archive}: a {size}-byte {what} (at most {cap})")
            padded = -(-size // BLOCK) * BLOCK
            body = src.read(padded)
            if len(body) < padded:
                raise BundleError(f"{archive}: truncated extended header")
            if kind in (_PAX, _PAX_GLOBAL):
                _check_pax(body[:size], body[size:], archive)
            continue
        chain = 0
        members += 1
        if members > MAX_MEMBERS:
            raise BundleError(f"{archive}: more than {MAX_MEMBERS} members")
        if kind == _HARD:
            raise BundleError(f"{archive}: member {shown!r} is a hard link")
        if kind in _DEVS:
            raise BundleError(f"{archive}: member {shown!r} is a device or fifo")
        if kind == _AREG and name.endswith(b"/"):
            kind = _DIR  # old V7 directories, as tarfile reads them
        if kind in (_DIR, _SYM):
            if size:  # tarfile skips no data for these: a size would desynchronise us
                raise BundleError(f"{archive}: member {shown!r} has a size but no data")
            continue
        if kind not in (_REG, _AREG):
            raise BundleError(f"{archive}: member {shown!r} has an unsupported type {kind!r}")
        data_total += size
        if data_total > MAX_UNPACKED_BYTES:
            raise BundleError(f"{archive}: unpacks to more than {MAX_UNPACKED_BYTES} bytes")
        src.skip(-(-size // BLOCK) * BLOCK)


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
                        shutil.copyfileobj(src, out, _READ)
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
        _prescan(fh, archive)
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


class _SignalGuard:
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


class LoadedBundle:
    def __init__(self, path: Path, meta: Dict[str, Any], host: Host, cleanup: Optional[str],
                 guard: Optional[_SignalGuard] = None):
        self.path = path
        self.meta = meta
        self.host = host
        self._cleanup = cleanup
        self._guard = guard

    def close(self) -> None:
        if self._cleanup:
            shutil.rmtree(self._cleanup, ignore_errors=True)
            self._cleanup = None
        if self._guard is not None:
            self._guard.close()
            self._guard = None


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISREG(mode):
        return "regular file"
    return "device, FIFO or socket"


def _lstat_mode(path: Path) -> Optional[int]:
    """The entry's own mode (lstat(2): a link is not followed); None when absent."""
    try:
        return os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise BundleError(f"{path}: unreadable ({exc.strerror or exc})") from None


def _check_layout(base: Path) -> None:
    """Top-level entries, checked with lstat(2): the files regular files, root/ a directory.
    A symlink there would be followed by the OS (kmsg.log -> /dev/zero, root -> /), outside
    the chroot-style resolution that keeps reads under root/ inside the bundle."""
    for name in TOP_FILES:
        mode = _lstat_mode(base / name)
        if mode is not None and not stat.S_ISREG(mode):
            raise BundleError(f"{base / name}: must be a regular file, not a {_kind(mode)}")
    mode = _lstat_mode(base / "root")
    if mode is not None and not stat.S_ISDIR(mode):
        raise BundleError(f"{base / 'root'}: must be a directory, not a {_kind(mode)}")


def _read_top(base: Path, name: str) -> Optional[bytes]:
    """A top-level file's bytes (None when absent), capped (TOP_CAPS), never through a link."""
    path = base / name
    cap = TOP_CAPS[name]
    try:
        return read_bytes_capped(path, cap, nofollow=True)
    except FileNotFoundError:
        return None
    except ReadCapExceeded:
        raise BundleError(f"{path}: larger than the {cap}-byte cap for {name}") from None
    except NotARegularFile:
        raise BundleError(f"{path}: must be a regular file") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise BundleError(f"{path}: must be a regular file, not a symlink") from None
        raise BundleError(f"{path}: unreadable ({exc.strerror or exc})") from None


def _text(path: Path, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BundleError(f"{path}: unreadable (not UTF-8 at byte {exc.start})") from None


def _load_yaml(base: Path, name: str, default: Any) -> Any:
    data = _read_top(base, name)
    if data is None:
        return default
    path = base / name
    try:
        return safe_load(_text(path, data))
    except YamlError as exc:
        mark = exc.problem_mark
        line = f" line {mark.line + 1}:" if mark is not None else ""
        raise BundleError(f"{path}:{line} invalid YAML ({exc.problem})") from None


def _load_json(base: Path, name: str) -> Optional[Dict[str, Any]]:
    data = _read_top(base, name)
    if data is None:
        return None
    path = base / name
    try:
        value = jsonio.loads(_text(path, data))
    except jsonio.JsonError as exc:
        raise BundleError(f"{path}: {exc}") from None
    if not isinstance(value, dict):
        raise BundleError(f"{path}: expected a JSON object at the top level")
    return value


def _unpack(src: Path) -> Tuple[str, _SignalGuard]:
    guard = _SignalGuard()
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


def load_bundle(path: Union[str, "os.PathLike[str]"]) -> LoadedBundle:
    src = Path(path)
    cleanup = None
    guard = None
    if src.is_file():
        cleanup, guard = _unpack(src)
        base = Path(cleanup)
    elif src.is_dir():
        base = src
    else:
        raise BundleError(f"{src}: no such bundle (a directory or a .tar.gz)")
    try:
        if cleanup:
            # Accept both a flat archive and one with a single top-level directory (a real
            # one: lstat, so a lone symlink is never taken as the bundle).
            entries = os.listdir(cleanup)
            if (
                "bundle.yaml" not in entries
                and len(entries) == 1
                and stat.S_ISDIR(os.lstat(base / entries[0]).st_mode)
            ):
                base = base / entries[0]
        _check_layout(base)
        meta = _load_yaml(base, "bundle.yaml", None)
        if meta is None:
            raise BundleError(f"{base / 'bundle.yaml'}: missing; not a bundle")
        if not isinstance(meta, dict):
            raise BundleError(f"{base / 'bundle.yaml'}: expected a mapping")
        fmt = meta.get("format_version")
        if fmt != FORMAT_VERSION:
            raise BundleError(
                f"{base / 'bundle.yaml'}: field 'format_version' is {fmt!r}; "
                f"this agent reads {FORMAT_VERSION}"
            )
        records = _load_yaml(base, "commands.yaml", [])
        if records is None:
            records = []
        if not isinstance(records, list):
            raise BundleError(f"{base / 'commands.yaml'}: expected a list of commands")
        commands = RecordedCommands(records, str(base / "commands.yaml"))
        gpus = _load_json(base, "gpus.json")
        facts = _load_json(base, "host.json") or {}
        kmsg_data = _read_top(base, "kmsg.log")
        kmsg = None
        if kmsg_data is not None:
            if kmsg_data.count(b"\n") > MAX_KMSG_LINES:
                raise BundleError(f"{base / 'kmsg.log'}: more than {MAX_KMSG_LINES} lines")
            # Split on "\n" only (the kernel's record separator; /dev/kmsg escapes control
            # characters as \xNN): str.splitlines() would also split on \r, \f, \x1c...,
            # and a file of those would bypass the line cap.
            kmsg = kmsg_data.decode("utf-8", errors="replace").split("\n")
            if kmsg and not kmsg[-1]:
                kmsg.pop()
        del kmsg_data
        host = Host(
            base / "root",
            commands=commands,
            gpus=StaticGpus(gpus),
            facts=StaticFacts(facts),
            kmsg=kmsg,
            description=f"bundle {src}",
            live=False,
        )
    except BaseException:
        if cleanup:
            shutil.rmtree(cleanup, ignore_errors=True)
        if guard is not None:
            guard.close()
        raise
    return LoadedBundle(base, meta, host, cleanup, guard)


def write_bundle_meta(dest: Path, meta: Mapping[str, Any]) -> None:
    (dest / "bundle.yaml").write_text(
        yaml.safe_dump({"format_version": FORMAT_VERSION, **meta}, sort_keys=False)
    )


def command_records(results: List[CommandResult]) -> List[Dict[str, Any]]:
    out = []
    for res in results:
        rec: Dict[str, Any] = {"argv": list(res.argv), "rc": res.rc}
        rec["stdout"] = res.stdout
        rec["stderr"] = res.stderr
        if res.timed_out:
            rec["timed_out"] = True
        out.append(rec)
    return out
