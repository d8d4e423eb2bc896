"""Bundles: a captured Host in one format for fixtures, support cases and the README demo.

Layout (docs/bundle-format.md): bundle.yaml, root/, commands.yaml, gpus.json, host.json,
kmsg.log. A bundle is hostile input (a support engineer runs `check --bundle` on a customer's
file; `run --bundle` runs as root), so:

- a `.tar.gz` is unpacked by our own extractor, never tarfile's (agent/host/bundle_unpack.py):
  before tarfile parses a header, a raw pre-scan of the gzip stream bounds the decompressed
  size, the member count, every header and every PAX/GNU long-name header
  (agent/host/bundle_prescan.py: tarfile's quadratic PAX parser, CVE-2024-6232, is never
  reached with a big one). Files are then created relative to directory fds with
  O_NOFOLLOW|O_EXCL: nothing is ever created through a symlink, duplicates and members under
  a symlink are refused;
- top-level entries must be regular files and root/ a real directory (lstat), for directory
  bundles too, and are read with size caps (TOP_CAPS);
- the Host is built with ``live=False``: a bundle is never judged as this machine.
"""
import errno
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import yaml

from agent.errors import BundleError
from agent.host.seam import Host, StaticFacts, StaticGpus
from agent.hostview import CommandResult
from agent.safeio import jsonio
from agent.safeio.bounded import NotARegularFile, ReadCapExceeded, read_bytes_capped
from agent.safeio.yamlio import YamlError, safe_load

if TYPE_CHECKING:
    from agent.host.bundle_unpack import SignalGuard

__all__ = ["BundleError", "load_bundle"]

FORMAT_VERSION = 1
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


class LoadedBundle:
    def __init__(self, path: Path, meta: Dict[str, Any], host: Host, cleanup: Optional[str],
                 guard: Optional["SignalGuard"] = None):
        self.path = path
        self.meta = meta
        self.host = host
        self._cleanup = cleanup
        self._guard = guard

    def close(self) -> None:
        if self._cleanup:  # an unpacked archive (bundle_unpack.py has imported shutil)
            import shutil

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


def load_bundle(path: Union[str, "os.PathLike[str]"]) -> LoadedBundle:
    src = Path(path)
    cleanup = None
    guard = None
    if src.is_file():
        # Imported here: a directory bundle needs no extractor (tarfile, zlib).
        from agent.host.bundle_unpack import unpack

        cleanup, guard = unpack(src)
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
            static=True,  # a recording: nothing under root changes while it is judged
        )
    except BaseException:
        if cleanup:
            import shutil

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
