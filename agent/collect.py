"""`gpu-node-agent collect`: capture exactly what the checks declare into a bundle.

Files listed in ``reads`` are copied (redacted); ``presence`` globs become empty placeholders
(or the symlinks themselves), so a bundle never carries a library or binary; commands in
``runs`` are run and recorded (a missing binary as rc 127); declared facts go to host.json;
the GPU snapshot to gpus.json; the kernel log to kmsg.log.
"""
import json
import os
import shutil
import socket
import stat
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Sequence, Set, Tuple

import yaml

from agent.bundle import command_records, write_bundle_meta
from agent.host import CommandResult, Host
from agent.model import Check
from agent.redact import redact
from agent.version import version

ALWAYS_READ = ("/proc/sys/kernel/random/boot_id", "/proc/sys/kernel/hostname")
MAX_FILE_BYTES = 4 * 1024 * 1024


Targets = Tuple[List[str], List[str], List[Tuple[str, ...]]]


def _targets(host: Host, checks: Sequence[Check]) -> Targets:
    reads: List[str] = list(ALWAYS_READ)
    presence: List[str] = []
    runs: List[Tuple[str, ...]] = []
    for check in checks:
        reads.extend(check.reads)
        presence.extend(check.presence)
        runs.extend(check.runs)
        if check.discover is not None:
            try:
                more_reads, more_presence = check.discover(host)
            except Exception:  # a discover hook must never stop a capture
                more_reads, more_presence = (), ()
            reads.extend(more_reads)
            presence.extend(more_presence)
    return _unique(reads), _unique(presence), _unique(runs)


def _unique(items: Sequence[Any]) -> List[Any]:
    seen: Set[Any] = set()
    out = []
    for item in items:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out


def _dest(root: Path, host_path: str) -> Path:
    return root.joinpath(*[p for p in host_path.split("/") if p and p != ".."])


def _copy_file(host: Host, host_path: str, root: Path) -> None:
    try:
        real = host.real_path(host_path)
        st = os.lstat(real)
    except OSError:
        return
    dest = _dest(root, host_path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    if stat.S_ISLNK(st.st_mode):
        # Keep the link and capture what it points to, so chroot resolution works.
        target = os.readlink(real)
        if not dest.exists() and not dest.is_symlink():
            os.symlink(target, dest)
        resolved = (
            target if target.startswith("/") else os.path.join(os.path.dirname(host_path), target)
        )
        _copy_file(host, os.path.normpath(resolved), root)
        return
    if stat.S_ISDIR(st.st_mode):
        dest.mkdir(parents=True, exist_ok=True)
        return
    try:
        data = host.read_bytes(host_path, MAX_FILE_BYTES)
    except OSError:
        return
    dest.write_text(redact(data.decode("utf-8", errors="replace")), encoding="utf-8")
    os.chmod(dest, 0o644 | (0o111 if st.st_mode & 0o111 else 0))


def _placeholder(host: Host, host_path: str, root: Path) -> None:
    try:
        real = host.real_path(host_path) if not host.is_live else Path(host_path)
        st = os.lstat(real)
    except OSError:
        return
    dest = _dest(root, host_path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.exists() or dest.is_symlink():
        return
    if stat.S_ISLNK(st.st_mode):
        os.symlink(os.readlink(real), dest)
    elif stat.S_ISDIR(st.st_mode):
        dest.mkdir(exist_ok=True)
    else:
        dest.touch()
        os.chmod(dest, 0o644 | (0o111 if st.st_mode & 0o111 else 0))


def collect(host: Host, checks: Sequence[Check], out: str, timeout_scale: float = 1.0) -> Path:
    """Write a bundle directory, or a .tar.gz when ``out`` ends with .tar.gz. Returns it."""
    as_tar = out.endswith(".tar.gz")
    work = Path(tempfile.mkdtemp(prefix="gna-collect-"))
    try:
        bundle = work / "bundle"
        root = bundle / "root"
        root.mkdir(parents=True)
        reads, presence, runs = _targets(host, checks)
        for pattern in reads:
            for path in host.glob(pattern):
                _copy_file(host, path, root)
        for pattern in presence:
            for path in host.glob(pattern):
                _placeholder(host, path, root)
        results: List[CommandResult] = [
            host.run(list(argv), timeout=10 * timeout_scale) for argv in runs
        ]
        # A source that cannot answer (a bundle being re-collected, a bare tree) records
        # nothing: replaying the new bundle then says "not recorded", as the old one did.
        records = command_records([r for r in results if not r.not_recorded])
        for rec in records:
            rec["stdout"] = redact(rec["stdout"])
            rec["stderr"] = redact(rec["stderr"])
        (bundle / "commands.yaml").write_text(yaml.safe_dump(records, sort_keys=False))
        fact_names = _unique([f for c in checks for f in c.facts])
        facts: Dict[str, Any] = {name: host.fact(name) for name in fact_names}
        (bundle / "host.json").write_text(json.dumps(facts, indent=2, sort_keys=True) + "\n")
        if any(c.uses_gpus for c in checks):
            snapshot = host.gpus()
            if snapshot is not None:
                (bundle / "gpus.json").write_text(json.dumps(snapshot, indent=2) + "\n")
        if any(c.uses_kmsg for c in checks):
            lines = host.kmsg()
            if lines is not None:
                (bundle / "kmsg.log").write_text("\n".join(lines) + ("\n" if lines else ""))
        write_bundle_meta(
            bundle,
            {
                "hostname": host.hostname() or socket.gethostname(),
                "boot_id": host.boot_id(),
                "captured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "provenance": f"gpu-node-agent {version()} collect on {host.description}",
            },
        )
        target = Path(out)
        if as_tar:
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(target.name + ".partial")
            with tarfile.open(tmp, "w:gz") as tar:
                for entry in sorted(bundle.iterdir()):
                    tar.add(entry, arcname=entry.name)
            os.replace(tmp, target)
        else:
            if target.exists() and any(target.iterdir()):
                raise FileExistsError(f"{target}: exists and is not empty")
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.exists():
                target.rmdir()
            shutil.move(str(bundle), str(target))
        return target
    finally:
        shutil.rmtree(work, ignore_errors=True)
