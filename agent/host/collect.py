"""`gpu-node-agent collect`: capture exactly what the checks declare into a bundle.

Files listed in ``reads`` are copied (redacted, agent/host/redact.py); ``presence`` globs become
empty placeholders (or the symlinks themselves), so a bundle never carries a library or binary;
commands in ``runs`` are run and recorded (a missing binary as rc 127) with their output
redacted; declared facts go to host.json; the GPU snapshot to gpus.json; the kernel log to
kmsg.log.

What may be copied (docs/bundle-format.md, "What collect copies"):
- A path is resolved component by component from a file descriptor of the host root with
  ``O_PATH|O_NOFOLLOW`` (agent/host/resolve.py: symlinks inside the root are followed as the
  kernel would, chroot semantics, at most 40 hops: path_resolution(7)), so ``/var/run`` ->
  ``/run`` and merged-/usr links keep working and no component can be swapped between the
  check and the read.
- The *final* target is copied only when it matches a declared read pattern of the selected
  checks, the pattern's directory resolved the same way (``/var/run/cdi/*.yaml`` allows
  ``/run/cdi/x.yaml``), or, for containerd ``imports`` found by a ``discover`` hook, when it is a
  ``*.toml`` file below ``/etc/containerd/`` (resolved). Anything else (a CDI spec linked to
  ``/etc/shadow``, an import in ``/home``) is recorded as the link alone, with no content, and
  named under ``collect_skipped`` in bundle.yaml.
- The bundle is staged in a fresh 0700 directory beside the output and written without ever
  following a link or replacing a file (agent/host/collect_write.py).
"""
import errno
import json
import logging
import os
import posixpath
import shutil
import socket
import stat
import tempfile
import time
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Set, Tuple

import yaml

from agent.errors import OutputError
from agent.host.bundle import command_records, write_bundle_meta
from agent.host.collect_write import Tree, check_target, lock_down, write_new, write_tar
from agent.host.redact import TooLarge, redact_command_output, redact_data, redact_file
from agent.host.redact_lines import redact_text
from agent.host.resolve import MAX_SYMLINK_HOPS, Resolver, read_fd
from agent.host.seam import Host
from agent.hostview import CommandResult
from agent.model import Check
from agent.version import version

ALWAYS_READ = ("/proc/sys/kernel/random/boot_id", "/proc/sys/kernel/hostname")
# containerd `imports` found by a discover hook are copied only from here: every layout the
# checks know keeps its drop-ins below /etc/containerd (conf.d for nvidia-ctk and Canonical
# Kubernetes, config.d for nodeadm; docs/checks-container.md).
IMPORT_DIRS = ("/etc/containerd",)
IMPORT_SUFFIX = ".toml"
# Binary reads, copied byte for byte (as text their bytes would be replaced): glibc's
# ld.so.cache holds sonames and library paths only (ldconfig(8)); agent/ldcache.py parses it.
VERBATIM_NAMES = frozenset({"ld.so.cache"})

# The least a recorded command is given (the Check default, agent/model.py); a check with a
# longer timeout_s (a site check's sidecar `timeout`) gives its commands that: its own bound.
DEFAULT_RUN_TIMEOUT_S = 10.0

log = logging.getLogger("gpu-node-agent.host.collect")


class Targets:
    def __init__(self) -> None:
        self.reads: List[str] = list(ALWAYS_READ)  # declared patterns: the allow-list
        self.discovered: List[str] = []  # discover-hook reads: containerd imports
        self.presence: List[str] = []
        self.runs: List[Tuple[str, ...]] = []
        # argv -> the longest timeout_s of the checks that declare it
        self.run_timeouts: Dict[Tuple[str, ...], float] = {}

    def run_timeout(self, argv: Tuple[str, ...], scale: float = 1.0) -> float:
        """The longest declaring check's timeout_s, at least the default, times the scale."""
        return max(DEFAULT_RUN_TIMEOUT_S, self.run_timeouts.get(argv, 0.0)) * scale


def _targets(host: Host, checks: Sequence[Check]) -> Targets:
    t = Targets()
    for check in checks:
        t.reads.extend(check.reads)
        t.presence.extend(check.presence)
        t.runs.extend(check.runs)
        for argv in check.runs:
            t.run_timeouts[argv] = max(t.run_timeouts.get(argv, 0.0), check.timeout_s)
        if check.discover is not None:
            try:
                more_reads, more_presence = check.discover(host)
            except Exception:  # a discover hook must never stop a capture
                more_reads, more_presence = (), ()
            t.discovered.extend(more_reads)
            t.presence.extend(more_presence)
    t.reads, t.presence, t.runs = _unique(t.reads), _unique(t.presence), _unique(t.runs)
    t.discovered = [p for p in _unique(t.discovered) if p not in t.reads]
    return t


def _unique(items: Sequence[Any]) -> List[Any]:
    seen: Set[Any] = set()
    out = []
    for item in items:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out


class AllowList:
    """Where a final target may lie: a declared read pattern with its directory resolved, or
    a discovered containerd import below IMPORT_DIRS."""

    def __init__(self, resolver: Resolver, reads: Sequence[str]) -> None:
        self.patterns: List[Tuple[str, str]] = []
        for pattern in reads:
            directory, name = posixpath.split(pattern)
            canon = resolver.canonical(directory or "/")
            if canon is not None:
                self.patterns.append((canon, name))
        self.import_dirs = [c for c in (resolver.canonical(d) for d in IMPORT_DIRS) if c]

    def declared(self, canonical: str) -> bool:
        directory, name = posixpath.split(canonical)
        return any(d == directory and fnmatchcase(name, n) for d, n in self.patterns)

    def import_file(self, canonical: str) -> bool:
        return canonical.endswith(IMPORT_SUFFIX) and any(
            canonical.startswith(d.rstrip("/") + "/") for d in self.import_dirs
        )


class Collector:
    def __init__(self, host: Host, tree: Tree, resolver: Resolver, allow: AllowList) -> None:
        self.host, self.tree, self.resolver, self.allow = host, tree, resolver, allow
        self.skipped: List[str] = []

    def _skip(self, line: str) -> None:
        if line not in self.skipped:
            self.skipped.append(line)
            log.warning("collect: %s", line)

    def _links(self, host_path: str) -> Iterator[Tuple[str, Optional[str]]]:
        """(path, link target as written) along the chain of final-component links from
        host_path; the last pair has None (the path the content belongs at)."""
        cur = posixpath.normpath(host_path)
        for _ in range(MAX_SYMLINK_HOPS):
            target = self.host.readlink(cur)
            if target is None:
                yield cur, None
                return
            yield cur, target
            base = "/" if target.startswith("/") else posixpath.dirname(cur)
            cur = posixpath.normpath(posixpath.join(base, target))

    def copy(self, host_path: str, discovered: bool) -> None:
        if self.tree.exists(host_path):
            return
        try:
            fd, canonical = self.resolver.open(host_path)
        except OSError:
            return  # absent, dangling or a loop: the check sees it missing too
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                return  # reads are files; a device or FIFO is never read
            allowed = self.allow.declared(canonical) or (
                discovered and self.allow.import_file(canonical)
            )
            if not allowed:
                where = host_path if canonical == host_path else f"{host_path} -> {canonical}"
                rule = (f"a containerd import is copied only as *{IMPORT_SUFFIX} below "
                        f"{', '.join(IMPORT_DIRS)}" if discovered else "not a declared read")
                self._skip(f"{where}: content not copied ({rule})")
                for path, target in self._links(host_path):
                    if target is not None:
                        self.tree.symlink(path, target)
                return
            try:
                data = read_fd(fd, host_path)
            except OSError as exc:
                self._skip(f"{host_path}: not read ({exc.strerror or exc})")
                return
        finally:
            os.close(fd)
        content = data if posixpath.basename(canonical) in VERBATIM_NAMES else redact_file(
            host_path, data.decode("utf-8", errors="replace")).encode()
        for path, target in self._links(host_path):
            if target is not None:
                self.tree.symlink(path, target)
            else:
                self.tree.write(path, content, 0o700 if mode & 0o111 else 0o600)

    def placeholder(self, host_path: str) -> None:
        """Existence, type, mode bit x and symlink targets, never content."""
        for path, target in self._links(host_path):
            if self.tree.exists(path):
                return
            if target is not None:
                self.tree.symlink(path, target)
                continue
            try:
                parent = self.host.real_path(posixpath.dirname(path) or "/")
                st = os.lstat(parent / posixpath.basename(path))
            except (OSError, ValueError):
                return
            if stat.S_ISDIR(st.st_mode):
                self.tree.mkdir(path)
            else:
                self.tree.write(path, b"", 0o700 if st.st_mode & 0o111 else 0o600)


def collect(host: Host, checks: Sequence[Check], out: str, timeout_scale: float = 1.0) -> Path:
    """Write a bundle directory, or a .tar.gz when ``out`` ends with .tar.gz. Returns it.
    Raises OutputError (exit 2) when ``out`` exists (a non-empty directory, a file, a link)."""
    as_tar = out.endswith(".tar.gz")
    target = Path(out)
    check_target(target, as_tar)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=".gna-collect-", dir=str(target.parent)))  # 0700
    except OSError as exc:  # a read-only or foreign directory: the user's choice of -o
        raise OutputError(f"{target.parent}: cannot write the bundle there "
                          f"({exc.strerror or exc})") from None
    resolver = Resolver(host.root)
    try:
        bundle = work / "bundle"
        bundle.mkdir(0o700)
        (bundle / "root").mkdir(0o700)
        targets = _targets(host, checks)
        collector = Collector(host, Tree(bundle / "root"), resolver,
                              AllowList(resolver, targets.reads))
        for pattern, discovered in [(p, False) for p in targets.reads] + [
            (p, True) for p in targets.discovered
        ]:
            try:
                paths = host.glob(pattern)
            except ValueError:
                continue
            for path in paths:
                collector.copy(path, discovered)
        for pattern in targets.presence:
            try:
                paths = host.glob(pattern)
            except ValueError:
                continue
            for path in paths:
                collector.placeholder(path)
        results: List[CommandResult] = [
            host.run(list(argv), timeout=targets.run_timeout(argv, timeout_scale))
            for argv in targets.runs
        ]
        # A source that cannot answer (a bundle being re-collected, a bare tree) records
        # nothing: replaying the new bundle then says "not recorded", as the old one did.
        records = command_records([r for r in results if not r.not_recorded])
        for rec in records:
            rec["stdout"] = redact_command_output(rec["argv"], rec["stdout"])
            rec["stderr"] = redact_text(rec["stderr"])
        write_new(bundle / "commands.yaml", yaml.safe_dump(records, sort_keys=False))
        fact_names = _unique([f for c in checks for f in c.facts])
        facts: Dict[str, Any] = {name: host.fact(name) for name in fact_names}
        try:
            facts = redact_data(facts)
        except (TooLarge, RecursionError):
            facts = {name: None for name in facts}  # unknown rather than unredacted
        write_new(bundle / "host.json", json.dumps(facts, indent=2, sort_keys=True) + "\n")
        if any(c.uses_gpus for c in checks):
            snapshot = host.gpus()
            if snapshot is not None:
                write_new(bundle / "gpus.json", json.dumps(snapshot, indent=2) + "\n")
        if any(c.uses_kmsg for c in checks):
            lines = host.kmsg()
            if lines is not None:
                text = "\n".join(lines) + ("\n" if lines else "")
                write_new(bundle / "kmsg.log", redact_text(text))
        meta: Dict[str, Any] = {
            "hostname": host.hostname() or socket.gethostname(),
            "boot_id": host.boot_id(),
            "captured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "provenance": f"gpu-node-agent {version()} collect on {host.description}",
        }
        if collector.skipped:
            meta["collect_skipped"] = collector.skipped
        write_bundle_meta(bundle, meta)
        lock_down(bundle)
        if as_tar:
            write_tar(bundle, target)
        else:
            try:  # rename(2) replaces an empty directory and nothing else
                os.rename(str(bundle), str(target))
            except OSError as exc:
                if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
                    raise OutputError(f"{target}: exists and is not an empty directory") from None
                raise
        return target
    finally:
        resolver.close()
        shutil.rmtree(work, ignore_errors=True)
