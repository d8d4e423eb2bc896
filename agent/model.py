"""The core's types: check metadata, results, allocation paths.

Checks depend on these types only; the engine, the report and the outputs consume them.
Statuses are lowercase strings everywhere (JSON, metric labels, text): docs/json-output.md.
"""
from enum import Enum
from typing import Any, Callable, Mapping, Optional, Sequence, Tuple

from agent.hostview import HostView
from agent.records import field, record


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


# Allocation paths, in the order of the README's gating table.
PATHS: Tuple[str, ...] = ("device-plugin", "dra", "operator-clusterpolicy", "operator-gpucluster")
ALL_PATHS = PATHS
DRA_PATHS: Tuple[str, ...] = ("dra", "operator-gpucluster")
RUNTIME_HANDLER_PATHS: Tuple[str, ...] = ("device-plugin", "operator-clusterpolicy")

# Live facts a check may declare it needs (collect captures them into host.json).
# What a config without `policy_version` gets (checks/policy_v<N>.yaml). A version never
# changes once released: a new or tightened gate arrives in the next one, so a config pinned
# to an older version keeps its gates across agent upgrades (docs/upgrading.md).
LATEST_POLICY_VERSION = 2

FACT_NAMES: Tuple[str, ...] = (
    "pci_devices", "dev_nodes", "adjtimex", "node", "sticky", "resourceslices",
    # gpu-workload's record (agent/host/workload.py): an action, run only where asked.
    "workload",
)


# Why a check is `skip` (the JSON's `skip` field). Three kinds, so a skip never hides a
# verdict: the check does not apply (path, hardware), the fact it reads is absent, or it
# cannot run without another check's result (`needs:<id>`, the id that owns the problem).
# `configured` is the operator's own choice (--skip or `skip:` in the config).
SKIP_NOT_APPLICABLE = "not-applicable"
SKIP_INPUT_MISSING = "input-missing"
SKIP_CONFIGURED = "configured"
SKIP_NEEDS_PREFIX = "needs:"


def needs_kind(check_id: str) -> str:
    return f"{SKIP_NEEDS_PREFIX}{check_id}"


@record(frozen=True)
class Outcome:
    """What a check's ``run`` returns: a value, never an exception."""

    status: Status
    summary: str
    details: Mapping[str, Any] = field(default_factory=dict)
    # A check may sharpen its static remediation for this particular failure.
    remediation: Optional[str] = None
    # For a skip: one of the kinds above (None for any other status).
    skip: Optional[str] = None
    # For warn, fail and unknown: which of the check's declared failures this is
    # (``Check.failures``); the contract test holds every check to its list.
    code: Optional[str] = None


def passed(summary: str, **details: Any) -> Outcome:
    return Outcome(Status.PASS, summary, details)


def warned(summary: str, remediation: Optional[str] = None, code: Optional[str] = None,
           **details: Any) -> Outcome:
    return Outcome(Status.WARN, summary, details, remediation, code=code)


def failed(summary: str, remediation: Optional[str] = None, code: Optional[str] = None,
           **details: Any) -> Outcome:
    return Outcome(Status.FAIL, summary, details, remediation, code=code)


def unknown(summary: str, remediation: Optional[str] = None, code: Optional[str] = None,
            **details: Any) -> Outcome:
    return Outcome(Status.UNKNOWN, summary, details, remediation, code=code)


def skipped(summary: str, kind: str = SKIP_NOT_APPLICABLE, **details: Any) -> Outcome:
    """A skip of ``kind``: SKIP_NOT_APPLICABLE (the default), SKIP_INPUT_MISSING or
    needs_kind(owner). Prefer the three named helpers below, which say which."""
    return Outcome(Status.SKIP, summary, details, skip=kind)


def not_applicable(summary: str, **details: Any) -> Outcome:
    """The path or the hardware does not need this check (an operator-installed driver, no
    NVSwitch, kubelet absent where it is not gated)."""
    return Outcome(Status.SKIP, summary, details, skip=SKIP_NOT_APPLICABLE)


def input_missing(summary: str, **details: Any) -> Outcome:
    """The fact this check reads is absent (not captured, not reachable)."""
    return Outcome(Status.SKIP, summary, details, skip=SKIP_INPUT_MISSING)


def needs(owner: str, summary: str, **details: Any) -> Outcome:
    """This check cannot run without ``owner``'s result; ``owner`` reports the problem."""
    return Outcome(Status.SKIP, summary, details, skip=needs_kind(owner))


@record(frozen=True)
class Failure:
    """One distinct way a check does not pass, declared beside the check: the code its Outcome
    names, the status it produces, what the agent found, the fix, and where the rule comes from.
    `explain`, docs/checks.md and the README table are generated from these (docs/checks.md
    says how); kubeadm preflight's errors and node-problem-detector's reasons play this role."""

    code: str  # stable, kebab-case, unique within the check
    status: Status  # WARN, FAIL or UNKNOWN
    means: str  # one line: what was found
    fix: str  # what the operator does about it
    source: str  # the document, page or source file the rule comes from


@record(frozen=True)
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
    run: Callable[[HostView, Any], Outcome]
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
    discover: Optional[Callable[[HostView], Tuple[Sequence[str], Sequence[str]]]] = None
    timeout_s: float = 10.0
    description: str = ""
    # The distinct ways this check warns, fails or is unknown (see Failure).
    failures: Tuple[Failure, ...] = ()
    # The policy version that introduced this gate: under a config pinned to an older one the
    # check is `skip` (not-applicable), so pinning keeps the gates the config was written for.
    since_policy: int = 1

    def failure(self, code: str) -> Failure:
        for f in self.failures:
            if f.code == code:
                return f
        raise KeyError(f"{self.id} declares no failure {code!r}")


@record(frozen=True)
class PathOutcome:
    """A check's verdict on one allocation path where it differs from the report's path."""

    status: Status
    summary: str
    remediation: str
    skip: Optional[str] = None
    code: Optional[str] = None


@record(frozen=True)
class CheckResult:
    """One check's verdict in a report: its outcome on the report's path, with its metadata."""

    id: str
    title: str
    severity: Severity
    status: Status
    summary: str
    remediation: str
    gates: Tuple[str, ...]
    details: Mapping[str, Any]
    duration_s: float
    # For status skip: the kind (SKIP_* or needs:<id>).
    skip: Optional[str] = None
    # For warn, fail and unknown: the check's failure code (Outcome.code), when it names one.
    code: Optional[str] = None
    # Paths on which this check decides differently from the report's own path (the engine
    # evaluates a check per path when its verdict read the path); absent = the same.
    by_path: Mapping[str, PathOutcome] = field(default_factory=dict)

    def status_on(self, path: str) -> Status:
        other = self.by_path.get(path)
        return other.status if other is not None else self.status
