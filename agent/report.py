"""The immutable Report the engine's results become, and gate evaluation.

A path's gate is open when no critical check that gates it is fail or unknown; warn does not
close it. With strict, any gating check that is warn, fail or unknown closes it. Each path's
gate uses the check's verdict on that path (``CheckResult.status_on``), so ``gates[P]`` is what
``--path P`` alone decides, not the report path's verdicts reused.
"""
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

from agent.model import PATHS, CheckResult, Severity, Status

CLOSING = (Status.FAIL, Status.UNKNOWN)
CLOSING_STRICT = (Status.WARN, Status.FAIL, Status.UNKNOWN)


@dataclass(frozen=True)
class Gate:
    path: str
    open: bool
    blocking: Tuple[str, ...]


def evaluate_gate(results: Sequence[CheckResult], path: str, strict: bool = False) -> Gate:
    blocking = tuple(
        r.id
        for r in results
        if path in r.gates
        and (
            (r.severity == Severity.CRITICAL and r.status_on(path) in CLOSING)
            or (strict and r.status_on(path) in CLOSING_STRICT)
        )
    )
    return Gate(path, not blocking, blocking)


@dataclass(frozen=True)
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
) -> Report:
    gates: Dict[str, Gate] = {p: evaluate_gate(results, p, strict) for p in PATHS}
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
    )
