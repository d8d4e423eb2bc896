"""The immutable Report the engine's results become, and gate evaluation.

A path's gate is open when no critical check that gates it is fail or unknown; warn does not
close it. With strict, any gating check that is warn, fail or unknown closes it. Each path's
gate uses the check's verdict on that path (``CheckResult.status_on``), so ``gates[P]`` is what
``--path P`` alone decides, not the report path's verdicts reused.

A Report is the one value a cycle produces: besides the verdicts it carries what the outputs
render beside them (the GPU snapshot the checks saw, the NVML worker's counters, the XID
counts, the run's timestamps), so every output renders from it alone and nothing an output
reads can change under it (docs/architecture.md, "one run cycle"). The JSON output (schema 1,
docs/json-schema.md) prints none of those extra fields.
"""
from types import MappingProxyType
from typing import Any, Dict, Iterable, Mapping, Optional, Sequence, Tuple

from agent.gpu_health import GpuHealth
from agent.gpu_health import evaluate as evaluate_gpu_health
from agent.gpu_health import min_healthy_of as min_healthy_of  # the callers' one import
from agent.model import PATHS, Check, CheckResult, Interval, Severity, Status
from agent.records import field, record

CLOSING = (Status.FAIL, Status.UNKNOWN)
CLOSING_STRICT = (Status.WARN, Status.FAIL, Status.UNKNOWN)


@record(frozen=True)
class Gate:
    path: str
    open: bool
    blocking: Tuple[str, ...]


def evaluate_gate(results: Sequence[CheckResult], path: str, strict: bool = False,
                  health: Optional[GpuHealth] = None) -> Gate:
    """``health``: the per-GPU health (agent/gpu_health.py); while it tolerates the unhealthy
    GPUs on ``path``, a result that only names GPUs does not block."""
    blocking = tuple(
        r.id
        for r in results
        if path in r.gates
        and (
            (r.severity == Severity.CRITICAL and r.status_on(path) in CLOSING)
            or (strict and r.status_on(path) in CLOSING_STRICT)
        )
    )
    if health is not None and health.tolerates_on(path):
        by_id = {r.id: r for r in results}
        blocking = tuple(b for b in blocking if b not in health.attributed
                         or by_id[b].status_on(path) != by_id[b].status)
    return Gate(path, not blocking, blocking)


@record(frozen=True)
class KnownCheck:
    """A check the agent knows, run or not: the metrics show every one from the start."""

    id: str
    severity: Severity
    interval: Interval


@record(frozen=True)
class NodeFacts:
    """The Node publisher's last attempt (agent/outputs/node/result.py ``facts_after``), for
    the metrics. The publisher takes a Report after it is rendered, so a Report carries the
    attempt made before its cycle."""

    cordoned: Optional[bool] = None  # cordoned by this agent, as last read/written; None: unread
    publish_ok: bool = False  # the Node was read and every write the verdict needed accepted
    last_success: Optional[float] = None  # unix time of the last such attempt


@record(frozen=True)
class RunFacts:
    """What `run` knows about its own cycles (the daemon's; `check` has none)."""

    # check id -> unix time the check last ran (absent: not yet)
    last_run: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    last_success: Optional[float] = None  # unix time the last cycle completed
    cycle_duration: Optional[float] = None  # seconds the last cycle took
    config_reload_ok: bool = True
    start_time: float = 0.0  # unix time the agent started
    node: Optional[NodeFacts] = None  # None: no Node output, or no attempt yet

    def __post_init__(self) -> None:  # a read-only copy: the daemon's own dict moves on
        object.__setattr__(self, "last_run", MappingProxyType(dict(self.last_run)))


_EMPTY: Mapping[Any, Any] = MappingProxyType({})


@record(frozen=True)
class Report:
    path: str
    strict: bool
    results: Tuple[CheckResult, ...]
    gate: Gate
    gates: Mapping[str, Gate]  # every path, for metrics
    host: str
    generated_at: float
    agent_version: str
    context: Mapping[str, Any] = field(default_factory=dict)
    # Every check the agent knows (each has status series before its first run).
    checks: Tuple[KnownCheck, ...] = ()
    # The GPU snapshot the GPU checks of this cycle saw (docs/gpu-snapshot.md); None: none.
    gpus: Optional[Mapping[str, Any]] = None
    # The NVML worker's counters (timeouts, respawns, stuck_workers).
    # default_factory, not a shared default: Python 3.11 refuses an unhashable default (a
    # mappingproxy is hashable only from 3.12), and Debian 12's python3 is 3.11.
    nvml_stats: Mapping[str, int] = field(default_factory=lambda: _EMPTY)
    # (gpu index, XID code) -> events since boot.
    xid_counts: Mapping[Tuple[str, str], int] = field(default_factory=lambda: _EMPTY)
    run: RunFacts = RunFacts()
    # The policy version the verdicts were judged by (checks/policy_v<N>.yaml); None where no
    # policy was resolved (a pending report before the first cycle still names it).
    policy_version: Optional[int] = None
    # What made `run` produce it: "schedule" (the fast/slow cycles) or "event" (a GPU event
    # re-evaluated the checks it concerns: agent/daemon/triggers.py). Only scheduled Reports
    # count toward the consecutive open runs (``count_opens``).
    trigger: str = "schedule"
    # Per-GPU health (agent/gpu_health.py); None where no cycle ran (pending_report).
    health: Optional[GpuHealth] = None

    def result(self, check_id: str) -> Optional[CheckResult]:
        for r in self.results:
            if r.id == check_id:
                return r
        return None


def build_report(
    results: Sequence[CheckResult],
    path: str,
    strict: bool,
    host: str,
    generated_at: float,
    agent_version: str,
    context: Optional[Mapping[str, Any]] = None,
    checks: Iterable[Check] = (),
    gpus: Optional[Mapping[str, Any]] = None,
    nvml_stats: Optional[Mapping[str, int]] = None,
    xid_counts: Optional[Mapping[Tuple[str, str], int]] = None,
    run: Optional[RunFacts] = None,
    policy_version: Optional[int] = None,
    min_healthy_gpus: Optional[int] = None,
) -> Report:
    """``min_healthy_gpus``: the health policy's number (None: "all")."""
    health = evaluate_gpu_health(results, gpus, path, strict, min_healthy_gpus)
    gates: Dict[str, Gate] = {p: evaluate_gate(results, p, strict, health) for p in PATHS}
    return Report(
        path=path,
        strict=strict,
        results=tuple(results),
        gate=gates[path],
        gates=gates,
        host=host,
        generated_at=generated_at,
        agent_version=agent_version,
        context=dict(context or {}),
        policy_version=policy_version,
        health=health,
        **_extras(checks, gpus, nvml_stats, xid_counts, run),
    )


def pending_report(
    path: str,
    host: str,
    agent_version: str,
    checks: Iterable[Check] = (),
    gpus: Optional[Mapping[str, Any]] = None,
    nvml_stats: Optional[Mapping[str, int]] = None,
    xid_counts: Optional[Mapping[Tuple[str, str], int]] = None,
    run: Optional[RunFacts] = None,
    min_healthy_gpus: Optional[int] = None,
) -> Report:
    """The Report before the first cycle: no results, and no gate open (nothing has been
    checked yet, so no path may be called ready): ``gates`` is empty and ``gate`` closed
    with nothing blocking, no per-GPU health (``min_healthy_gpus`` is taken so `run` hands
    both builders the same arguments). Only `run` makes one, for the metrics it serves."""
    return Report(
        path=path,
        strict=False,
        results=(),
        gate=Gate(path, False, ()),
        gates=_EMPTY,
        host=host,
        generated_at=0.0,
        agent_version=agent_version,
        **_extras(checks, gpus, nvml_stats, xid_counts, run),
    )


def _extras(
    checks: Iterable[Check],
    gpus: Optional[Mapping[str, Any]],
    nvml_stats: Optional[Mapping[str, int]],
    xid_counts: Optional[Mapping[Tuple[str, str], int]],
    run: Optional[RunFacts],
) -> Dict[str, Any]:
    """The fields beyond the verdicts, frozen: read-only views over copies."""
    return {
        "checks": tuple(KnownCheck(c.id, c.severity, c.interval) for c in checks),
        "gpus": MappingProxyType(dict(gpus)) if isinstance(gpus, Mapping) else gpus,
        "nvml_stats": MappingProxyType(dict(nvml_stats or {})),
        "xid_counts": MappingProxyType(dict(xid_counts or {})),
        "run": run if run is not None else RunFacts(),
    }


def count_opens(opens: int, report: Any) -> int:
    """The consecutive open runs after ``report``: a closed gate resets the streak whatever
    triggered it (a fault closes at once); an event-driven open Report leaves it as it was,
    so a burst of events cannot hurry the allocation label (kube.consecutive_opens)."""
    if not report.gate.open:
        return 0
    return opens + 1 if getattr(report, "trigger", "schedule") == "schedule" else opens
