"""Bundles: a captured Host in one format for fixtures, support cases and the README demo.

Layout (DESIGN.md): bundle.yaml, root/, commands.yaml, gpus.json, host.json, kmsg.log.
A `.tar.gz` is unpacked with our own member checks, because Python 3.9 has no tarfile
extraction filters (PEP 706 arrived in 3.12 and was backported only to security releases).
"""
import json
import os
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import yaml

from agent.errors import BundleError
from agent.host import CommandResult, Host, StaticFacts, StaticGpus
from agent.yamlio import safe_load

__all__ = ["BundleError", "load_bundle"]

FORMAT_VERSION = 1
MAX_MEMBERS = 20000
MAX_UNPACKED_BYTES = 512 * 1024 * 1024


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


def _safe_extract(archive: Path, dest: Path) -> None:
    try:
        tar = tarfile.open(archive, "r:gz")  # noqa: SIM115 (closed by the with below)
    except (OSError, tarfile.TarError) as exc:
        raise BundleError(f"{archive}: not a readable .tar.gz ({exc})") from None
    total = 0
    with tar:
        members = []
        for count, member in enumerate(tar):
            if count >= MAX_MEMBERS:
                raise BundleError(f"{archive}: more than {MAX_MEMBERS} members")
            name = member.name
            parts = Path(name).parts
            if name.startswith("/") or ".." in parts:
                raise BundleError(f"{archive}: member {name!r} leaves the bundle")
            if member.isdev() or member.isfifo():
                raise BundleError(f"{archive}: member {name!r} is a device or fifo")
            if member.islnk():
                raise BundleError(f"{archive}: member {name!r} is a hard link")
            if member.issym():
                target = member.linkname
                # Links are kept only when they stay inside the bundle's root/ tree: an
                # absolute target is resolved against root/ later (chroot semantics).
                if not target.startswith("/"):
                    joined = os.path.normpath(os.path.join(os.path.dirname(name), target))
                    if joined.startswith("..") or os.path.isabs(joined):
                        raise BundleError(f"{archive}: link {name!r} points outside the bundle")
            elif not (member.isfile() or member.isdir()):
                raise BundleError(f"{archive}: member {name!r} has an unsupported type")
            total += max(member.size, 0)
            if total > MAX_UNPACKED_BYTES:
                raise BundleError(f"{archive}: unpacks to more than {MAX_UNPACKED_BYTES} bytes")
            members.append(member)
        for member in members:
            target_path = dest.joinpath(*Path(member.name).parts)
            if member.isdir():
                target_path.mkdir(parents=True, exist_ok=True)
            elif member.issym():
                target_path.parent.mkdir(parents=True, exist_ok=True)
                os.symlink(member.linkname, target_path)
            else:
                target_path.parent.mkdir(parents=True, exist_ok=True)
                src = tar.extractfile(member)
                if src is None:
                    continue
                with src, open(target_path, "wb") as out:
                    shutil.copyfileobj(src, out)
                os.chmod(target_path, member.mode & 0o755)


class LoadedBundle:
    def __init__(self, path: Path, meta: Dict[str, Any], host: Host, cleanup: Optional[str]):
        self.path = path
        self.meta = meta
        self.host = host
        self._cleanup = cleanup

    def close(self) -> None:
        if self._cleanup:
            shutil.rmtree(self._cleanup, ignore_errors=True)
            self._cleanup = None


def _load_yaml(path: Path, default: Any) -> Any:
    if not path.exists():
        return default
    try:
        return safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        raise BundleError(f"{path}:{line} invalid YAML") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BundleError(f"{path}: unreadable ({exc})") from None


def _load_json(path: Path) -> Optional[Dict[str, Any]]:
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise BundleError(f"{path}: line {exc.lineno}: invalid JSON ({exc.msg})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BundleError(f"{path}: unreadable ({exc})") from None
    if not isinstance(data, dict):
        raise BundleError(f"{path}: expected a JSON object at the top level")
    return data


def load_bundle(path: Union[str, "os.PathLike[str]"]) -> LoadedBundle:
    src = Path(path)
    cleanup = None
    if src.is_file():
        cleanup = tempfile.mkdtemp(prefix="gna-bundle-")
        try:
            _safe_extract(src, Path(cleanup))
        except BaseException:
            shutil.rmtree(cleanup, ignore_errors=True)
            raise
        entries = [e for e in os.listdir(cleanup)]
        # Accept both a flat archive and one with a single top-level directory.
        base = Path(cleanup)
        if "bundle.yaml" not in entries and len(entries) == 1 and (base / entries[0]).is_dir():
            base = base / entries[0]
    elif src.is_dir():
        base = src
    else:
        raise BundleError(f"{src}: no such bundle (a directory or a .tar.gz)")
    try:
        meta = _load_yaml(base / "bundle.yaml", None)
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
        records = _load_yaml(base / "commands.yaml", [])
        if records is None:
            records = []
        if not isinstance(records, list):
            raise BundleError(f"{base / 'commands.yaml'}: expected a list of commands")
        commands = RecordedCommands(records, str(base / "commands.yaml"))
        gpus = _load_json(base / "gpus.json")
        facts = _load_json(base / "host.json") or {}
        kmsg_path = base / "kmsg.log"
        kmsg = (
            kmsg_path.read_text(encoding="utf-8", errors="replace").splitlines()
            if kmsg_path.exists()
            else None
        )
        root = base / "root"
        host = Host(
            root,
            commands=commands,
            gpus=StaticGpus(gpus),
            facts=StaticFacts(facts),
            kmsg=kmsg,
            description=f"bundle {src}",
        )
    except BaseException:
        if cleanup:
            shutil.rmtree(cleanup, ignore_errors=True)
        raise
    return LoadedBundle(base, meta, host, cleanup)


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
