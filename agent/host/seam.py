"""The Host seam: every read of the host goes through one object.

``Host.root`` is a directory prefix ("/" in production, a fixture tree in tests), like
node_exporter's ``--path.rootfs`` or sos's ``--sysroot``. Commands, the GPU snapshot, live
facts and the kernel log come from *sources* handed in by the composition root: the real
machine (only when it says ``live=True``), a bundle's recordings, or nothing at all. Whether
a Host is this machine is decided by the source type, never by the path: a bundle whose
``root`` resolves to "/" is still a bundle. A Host that is not live, without an explicit
command source, refuses to run real commands, so a fixture can never silently mix with the
developer's machine (the python-distro rule).
"""
import fnmatch
import os
import posixpath
import stat
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Protocol, Sequence, Union, cast

from agent.host.resolve import HostPathError, Resolver
from agent.hostview import CommandResult
from agent.safeio.bounded import DEFAULT_CAP, ReadCapExceeded, read_bytes_capped
from agent.safeio.commands import SubprocessCommands
from agent.snapshot import GpuSnapshot

MAX_READ_BYTES = DEFAULT_CAP  # no file a check reads is this large; bounds a hostile bundle


class CommandSource(Protocol):
    def run(self, argv: Sequence[str], timeout: float) -> CommandResult: ...


class NoCommands:
    """The source for a bare tree (--host-root): every command is unavailable."""

    def __init__(self, why: str = "commands are not run under --host-root") -> None:
        self.why = why

    def run(self, argv: Sequence[str], timeout: float) -> CommandResult:
        return CommandResult(tuple(argv), -1, "", self.why, not_recorded=True)


class GpuSource(Protocol):
    def snapshot(self) -> Optional[Mapping[str, Any]]: ...


class FactSource(Protocol):
    def fact(self, name: str) -> Any: ...


class StaticGpus:
    def __init__(self, snapshot: Optional[Mapping[str, Any]]) -> None:
        self._snapshot = snapshot

    def snapshot(self) -> Optional[Mapping[str, Any]]:
        return self._snapshot


class StaticFacts:
    """Facts from a bundle's host.json; a fact absent there is None (unknown)."""

    def __init__(self, facts: Optional[Mapping[str, Any]] = None) -> None:
        self._facts = dict(facts or {})

    def fact(self, name: str) -> Any:
        return self._facts.get(name)


class Host:
    def __init__(
        self,
        root: Union[str, "os.PathLike[str]"] = "/",
        commands: Optional[CommandSource] = None,
        gpus: Optional[GpuSource] = None,
        facts: Optional[FactSource] = None,
        kmsg: Optional[Sequence[str]] = None,
        description: str = "",
        live: bool = False,
        static: bool = False,
    ) -> None:
        self.root = Path(root).resolve()
        # Only the composition root says "this machine" (agent/host/build.py live_host).
        self.is_live = bool(live)
        if self.is_live and str(self.root) != "/":
            raise ValueError(f"a live Host has the root '/', not {root!s}")
        if commands is None:
            commands = SubprocessCommands() if self.is_live else NoCommands()
        self._commands = commands
        self._gpus = gpus or StaticGpus(None)
        self._facts = facts or StaticFacts()
        self._kmsg = list(kmsg) if kmsg is not None else None
        self.description = description or str(self.root)
        self._gpu_snapshot: Optional[Mapping[str, Any]] = None
        self._gpu_taken = False
        # Files a read cap refused, for the report's warnings (one line per file).
        self.read_warnings: List[str] = []
        # A tree that cannot change while this Host lives (a bundle: agent/host/bundle.py)
        # maps, reads and lists each path once; 33 checks read ~250 paths, many twice or more.
        # Only successes are kept, so a refusal is raised (and noted) every time.
        self._memo: Optional[Dict[Any, Any]] = {} if static and not self.is_live else None

    # -- files -------------------------------------------------------------------------
    def real_path(self, path: str) -> Path:
        """Map a host path to a path on this machine, resolving symlinks inside the root
        (chroot semantics): an absolute link target is taken relative to the root, and `..`
        never climbs above it. The walk is agent/host/resolve.py's, from a descriptor of the
        root, the one `collect` copies through. Raises OSError (HostPathError for a loop)."""
        if not path.startswith("/"):
            raise HostPathError(f"host paths are absolute: {path!r}")
        if self.is_live:
            return Path(path)
        return cast(Path, self._once(("path", path), lambda: self._resolve(path)))

    def _resolve(self, path: str) -> Path:
        resolver = Resolver(self.root)
        try:
            canonical = resolver.resolve(path)
        finally:
            resolver.close()
        return self.root.joinpath(*[p for p in canonical.split("/") if p])

    def _once(self, key: Any, compute: Callable[[], Any]) -> Any:
        """``compute()``, kept under ``key`` on a static Host; an exception is never kept."""
        memo = self._memo
        if memo is None:
            return compute()
        if key not in memo:
            memo[key] = compute()
        return memo[key]

    def read_bytes(self, path: str, limit: int = MAX_READ_BYTES) -> bytes:
        """The whole file (page-sized reads to EOF; regular files only). Past ``limit`` it
        raises ReadCapExceeded and records a warning naming the file: never a silent cut."""
        try:
            return cast(bytes, self._once(("read", path, limit),
                                          lambda: read_bytes_capped(self.real_path(path), limit)))
        except ReadCapExceeded:
            note = f"{path}: larger than the {limit}-byte read cap; not read"
            if note not in self.read_warnings:
                self.read_warnings.append(note)
            raise

    def read_text(self, path: str) -> str:
        """The file's text (UTF-8, undecodable bytes replaced). Raises OSError if absent."""
        return self.read_bytes(path).decode("utf-8", errors="replace")

    def read_text_or_none(self, path: str) -> Optional[str]:
        try:
            return self.read_text(path)
        except (OSError, ValueError):
            return None

    def exists(self, path: str) -> bool:
        try:
            return self.real_path(path).exists()
        except (OSError, ValueError):
            return False

    def is_file(self, path: str) -> bool:
        try:
            return self.real_path(path).is_file()
        except (OSError, ValueError):
            return False

    def is_executable(self, path: str) -> bool:
        try:
            real = self.real_path(path)
            return real.is_file() and os.access(real, os.X_OK)
        except (OSError, ValueError):
            return False

    def is_socket(self, path: str) -> bool:
        try:
            mode = self.real_path(path).lstat().st_mode
        except (OSError, ValueError):
            return False
        # A bundle cannot hold a socket; collect records it as an empty regular file.
        return stat.S_ISSOCK(mode) or (not self.is_live and stat.S_ISREG(mode))

    def readlink(self, path: str) -> Optional[str]:
        """The target of a symlink (as written), or None when ``path`` is not a link."""
        try:
            parent = self.real_path(posixpath.dirname(path) or "/")
            return os.readlink(parent / posixpath.basename(path))
        except (OSError, ValueError):
            return None

    def listdir(self, path: str) -> List[str]:
        try:
            return list(self._once(("list", path),
                                   lambda: tuple(sorted(os.listdir(self.real_path(path))))))
        except (OSError, ValueError):
            return []

    def glob(self, pattern: str) -> List[str]:
        """Host paths matching a pattern whose wildcards are in the last component only
        (all the checks need: /etc/cdi/*.yaml, /etc/containerd/conf.d/*.toml)."""
        directory, name = posixpath.split(pattern)
        if any(ch in directory for ch in "*?["):
            raise ValueError(f"wildcards only in the last path component: {pattern}")
        if not any(ch in name for ch in "*?["):
            return [pattern] if self.exists(pattern) else []
        return [
            posixpath.join(directory, entry)
            for entry in self.listdir(directory)
            if fnmatch.fnmatchcase(entry, name)
        ]

    # -- commands, GPUs, facts, kernel log ------------------------------------------------
    def run(self, argv: Sequence[str], timeout: float = 10.0) -> CommandResult:
        return self._commands.run(list(argv), timeout)

    def gpus(self) -> Optional[GpuSnapshot]:
        """The GPU snapshot (docs/gpu-snapshot.md), taken once per Host; None = not captured.
        The sources hand plain dicts (the worker's JSON, a bundle's gpus.json): typed here as
        the documented record, validated by the checks that read it (checks/gpu/common.py)."""
        if not self._gpu_taken:
            self._gpu_snapshot = self._gpus.snapshot()
            self._gpu_taken = True
        return cast(Optional[GpuSnapshot], self._gpu_snapshot)

    def gpus_if_fetched(self, default: Any = None) -> Any:
        """The snapshot gpus() already took, else ``default``; never asks the source, so it
        cannot block (`run` reads what the GPU checks of its cycle saw: agent/daemon/cycle.py)."""
        return self._gpu_snapshot if self._gpu_taken else default

    def fact(self, name: str) -> Any:
        """A live fact (host.json key); None = unknown."""
        return self._facts.fact(name)

    def kmsg(self) -> Optional[List[str]]:
        """Kernel log lines since boot; None = not available."""
        return None if self._kmsg is None else list(self._kmsg)

    def boot_id(self) -> Optional[str]:
        text = self.read_text_or_none("/proc/sys/kernel/random/boot_id")
        return text.strip() if text else None

    def hostname(self) -> Optional[str]:
        text = self.read_text_or_none("/proc/sys/kernel/hostname") or self.read_text_or_none(
            "/etc/hostname"
        )
        return text.strip() if text else None


def facts_dict(source: FactSource, names: Sequence[str]) -> Dict[str, Any]:
    return {name: source.fact(name) for name in names}
