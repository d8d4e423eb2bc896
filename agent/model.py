"""The core's types: check metadata, results, allocation paths.

Checks depend on these types only; the engine, the report and the outputs consume them.
Statuses are lowercase strings everywhere (JSON, metric labels, text), as DESIGN.md says.
"""
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable, Mapping, Optional, Sequence, Tuple


class Status(str, Enum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    UNKNOWN = "unknown"
    SKIP = "skip"

    def __str__(self) -> str:  # so f-strings print "fail", not "Status.FAIL"
        return self.value


class Severity(str, Enum):
    CRITICAL = "critical"
    WARNING = "warning"

    def __str__(self) -> str:
        return self.value


class Interval(str, Enum):
    """How often `run` re-evaluates a check (see docs/checks.md)."""

    BOOTSTRAP = "bootstrap-only"
    SLOW = "slow"
    FAST = "fast"

    def __str__(self) -> str:
        return self.value


# Allocation paths, in the order DESIGN.md's gating matrix lists them.
PATHS: Tuple[str, ...] = ("device-plugin", "dra", "operator-clusterpolicy", "operator-gpucluster")
ALL_PATHS = PATHS
DRA_PATHS: Tuple[str, ...] = ("dra", "operator-gpucluster")
RUNTIME_HANDLER_PATHS: Tuple[str, ...] = ("device-plugin", "operator-clusterpolicy")

# Live facts a check may declare it needs (collect captures them into host.json).
FACT_NAMES: Tuple[str, ...] = ("pci_devices", "dev_nodes", "adjtimex", "node", "sticky")


@dataclass(frozen=True)
class Outcome:
    """What a check's ``run`` returns: a value, never an exception."""

    status: Status
    summary: str
    details: Mapping[str, Any] = field(default_factory=dict)
    # A check may sharpen its static remediation for this particular failure.
    remediation: Optional[str] = None


def passed(summary: str, **details: Any) -> Outcome:
    return Outcome(Status.PASS, summary, details)


def warned(summary: str, remediation: Optional[str] = None, **details: Any) -> Outcome:
    return Outcome(Status.WARN, summary, details, remediation)


def failed(summary: str, remediation: Optional[str] = None, **details: Any) -> Outcome:
    return Outcome(Status.FAIL, summary, details, remediation)


def unknown(summary: str, remediation: Optional[str] = None, **details: Any) -> Outcome:
    return Outcome(Status.UNKNOWN, summary, details, remediation)


def skipped(summary: str, **details: Any) -> Outcome:
    return Outcome(Status.SKIP, summary, details)


@dataclass(frozen=True)
class Check:
    """Declarative metadata plus the pure function that evaluates it.

    ``id`` is stable forever: it is the metric label, the ``--skip`` key and the docs anchor
    (kubeadm preflight's ``Name()`` plays the same role).
    """

    id: str
    title: str
    severity: Severity
    gates: Tuple[str, ...]
    interval: Interval
    remediation: str
    run: Callable[[Any, Any], Outcome]
    # What the check reads and runs; `collect` captures exactly these, so a bundle is
    # complete by construction.
    reads: Tuple[str, ...] = ()
    # Globs whose existence (name, mode, symlink target) matters but not their content:
    # collect records them as empty placeholders (libraries, binaries, sockets).
    presence: Tuple[str, ...] = ()
    runs: Tuple[Tuple[str, ...], ...] = ()
    facts: Tuple[str, ...] = ()
    uses_gpus: bool = False
    uses_kmsg: bool = False
    # Checks whose verdict this one builds on: if one of them is not pass/warn, this check
    # is `skip` naming it (the owner of the missing thing is the one that fails).
    requires: Tuple[str, ...] = ()
    # For reads that depend on file contents (a config's `imports`, the paths a CDI spec
    # names): discover(host) -> (reads, presence), called by collect after the static ones.
    discover: Optional[Callable[[Any], Tuple[Sequence[str], Sequence[str]]]] = None
    timeout_s: float = 10.0
    description: str = ""


@dataclass(frozen=True)
class CheckResult:
    id: str
    title: str
    severity: Severity
    status: Status
    summary: str
    remediation: str
    gates: Tuple[str, ...]
    details: Mapping[str, Any]
    duration_s: float
