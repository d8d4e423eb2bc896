"""What a check may ask of a host: the HostView protocol, and CommandResult, the one answer
type of a command run on it.

Checks receive a HostView (agent/host/seam.py's Host is the one implementation the agent builds:
the live machine, a bare tree or a bundle) and never import the host wing: they are pure
functions of what this protocol returns (docs/architecture.md). It lives in the core so that
agent/model.py can type ``Check.run`` and the engine can pass a Host without knowing its wing.
"""
from typing import Any, Callable, Collection, List, Optional, Protocol, Sequence, Tuple

from agent.records import record
from agent.snapshot import GpuSnapshot


@record(frozen=True)
class CommandResult:
    """One command's answer from a host: exit status and output, or why there is none."""

    argv: Tuple[str, ...]
    rc: int
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    # True when the answer does not come from the host at all: the argv was not recorded in
    # the bundle, or commands are unavailable (--host-root). rc is then -1.
    not_recorded: bool = False

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.timed_out and not self.not_recorded

    @property
    def not_installed(self) -> bool:
        # 127 is the shell's "command not found"; bundles record a missing binary that way.
        return self.rc == 127 and not self.not_recorded

    def describe(self) -> str:
        """A one-line reason for a result that is not ok, for check summaries."""
        cmd = " ".join(self.argv)
        if self.not_recorded:
            return f"`{cmd}` not recorded for this host"
        if self.timed_out:
            return f"`{cmd}` timed out"
        if self.not_installed:
            return f"`{self.argv[0]}` not installed"
        first = (self.stderr or self.stdout).strip().splitlines()
        return f"`{cmd}` exited {self.rc}" + (f": {first[0][:160]}" if first else "")


class HostView(Protocol):
    """The reads a check makes. Paths are host paths ("/etc/..."): an implementation maps them
    under its root and never lets one escape it; every read is bounded."""

    @property
    def is_live(self) -> bool:
        """True only for the machine the agent runs on (root "/")."""
        ...

    def read_bytes(self, path: str) -> bytes: ...

    def read_text(self, path: str) -> str: ...

    def read_text_or_none(self, path: str) -> Optional[str]: ...

    def exists(self, path: str) -> bool: ...

    def is_file(self, path: str) -> bool: ...

    def is_executable(self, path: str) -> bool: ...

    def is_socket(self, path: str) -> bool: ...

    def readlink(self, path: str) -> Optional[str]: ...

    def listdir(self, path: str) -> List[str]: ...

    def glob(self, pattern: str) -> List[str]: ...

    def run(self, argv: Sequence[str], timeout: float = 10.0) -> CommandResult: ...

    def gpus(self) -> Optional[GpuSnapshot]:
        """The GPU snapshot (docs/gpu-snapshot.md, typed in agent/snapshot.py); None when not
        captured. Its values are input (a bundle's gpus.json): checks validate what they read."""
        ...

    def fact(self, name: str) -> Any:
        """A live fact (agent/model.py FACT_NAMES); None when unknown."""
        ...

    def kmsg(self) -> Optional[List[str]]: ...

    def boot_id(self) -> Optional[str]: ...

    def hostname(self) -> Optional[str]: ...


class FactOverlay:
    """A host whose facts ``names`` are asked of ``source`` first (its answer None: the host's
    own); every other attribute is the host's. The composition root puts the Kubernetes API's
    facts in front of a live host this way (agent/kube/facts.py), and `run` its XID monitor's
    sticky faults (agent/daemon/inputs.py), without either knowing the other."""

    def __init__(self, host: Any, names: Collection[str], source: Callable[[str], Any]) -> None:
        # Prefixed: __getattr__ hands every other name to the host, these must not shadow one.
        self._gna_host = host
        self._gna_names = frozenset(names)
        self._gna_source = source

    def __getattr__(self, name: str) -> Any:
        return getattr(self._gna_host, name)

    def fact(self, name: str) -> Any:
        if name in self._gna_names:
            value = self._gna_source(name)
            if value is not None:
                return value
        return self._gna_host.fact(name)


__all__ = ["CommandResult", "FactOverlay", "HostView"]
