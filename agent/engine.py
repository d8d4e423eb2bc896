"""The engine: runs checks (given as an argument; it never imports the registry).

Each check runs in its own daemon thread with a deadline. Past it the check is `unknown`,
and while that thread is still alive the check is not started again, so a check that hangs
costs one thread, never one per cycle. An exception becomes `unknown` with its type in the
summary. A check whose `requires` did not pass is `skip` naming what it needs.
"""
import threading
import time
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set

from agent.model import Check, CheckResult, Outcome, Status

OK_FOR_DEPENDENTS = (Status.PASS, Status.WARN)


class RegistryError(Exception):
    pass


def order_checks(checks: Sequence[Check]) -> List[List[Check]]:
    """Group checks into waves: every check's requirements are in an earlier wave."""
    by_id: Dict[str, Check] = {}
    for check in checks:
        if check.id in by_id:
            raise RegistryError(f"duplicate check id {check.id}")
        by_id[check.id] = check
    for check in checks:
        for req in check.requires:
            if req not in by_id:
                raise RegistryError(f"{check.id} requires unknown check {req}")
    waves: List[List[Check]] = []
    placed: Set[str] = set()
    remaining = list(checks)
    while remaining:
        wave = [c for c in remaining if all(r in placed for r in c.requires)]
        if not wave:
            cycle = ", ".join(c.id for c in remaining)
            raise RegistryError(f"cycle in check requirements: {cycle}")
        waves.append(wave)
        placed.update(c.id for c in wave)
        remaining = [c for c in remaining if c.id not in placed]
    return waves


def closure(checks: Sequence[Check], wanted: Iterable[str]) -> List[Check]:
    """The wanted checks plus everything they require, in registry order."""
    by_id = {c.id: c for c in checks}
    keep: Set[str] = set()
    stack = list(wanted)
    while stack:
        cid = stack.pop()
        if cid in keep:
            continue
        keep.add(cid)
        stack.extend(by_id[cid].requires)
    return [c for c in checks if c.id in keep]


class _Slot:
    """One check's execution: a thread plus what it produced."""

    def __init__(self, check: Check, host: Any, policy: Any) -> None:
        self.check = check
        self.outcome: Optional[Outcome] = None
        self.started = time.monotonic()
        self.thread = threading.Thread(
            target=self._body, args=(host, policy), name=f"check:{check.id}", daemon=True
        )

    def _body(self, host: Any, policy: Any) -> None:
        try:
            outcome = self.check.run(host, policy)
            if not isinstance(outcome, Outcome):
                raise TypeError(f"returned {type(outcome).__name__}, not an Outcome")
            self.outcome = outcome
        except Exception as exc:  # a check must not raise; the engine contains it if it does
            text = str(exc).splitlines()[0][:200] if str(exc) else ""
            self.outcome = Outcome(
                Status.UNKNOWN,
                f"check raised {type(exc).__name__}" + (f": {text}" if text else ""),
                {"exception": type(exc).__name__},
            )


class Engine:
    def __init__(self, checks: Sequence[Check]) -> None:
        self.checks = list(checks)
        self._waves = order_checks(self.checks)
        self._inflight: Dict[str, _Slot] = {}
        self._lock = threading.Lock()

    def still_running(self) -> List[str]:
        with self._lock:
            return sorted(cid for cid, slot in self._inflight.items() if slot.thread.is_alive())

    def run(
        self,
        host: Any,
        policy: Any,
        only: Optional[Iterable[str]] = None,
        skip: Iterable[str] = (),
        timeout_scale: float = 1.0,
    ) -> List[CheckResult]:
        selected = closure(self.checks, only) if only is not None else self.checks
        selected_ids = {c.id for c in selected}
        skip_set = set(skip)
        results: Dict[str, CheckResult] = {}
        for wave in self._waves:
            slots: List[_Slot] = []
            for check in wave:
                if check.id not in selected_ids:
                    continue
                early = self._pre_outcome(check, skip_set, results)
                if early is not None:
                    results[check.id] = _result(check, early, 0.0)
                    continue
                slot = _Slot(check, host, policy)
                with self._lock:
                    self._inflight[check.id] = slot
                slot.thread.start()
                slots.append(slot)
            for slot in slots:
                deadline = slot.started + slot.check.timeout_s * timeout_scale
                slot.thread.join(max(0.0, deadline - time.monotonic()))
                elapsed = time.monotonic() - slot.started
                if slot.thread.is_alive():
                    outcome = Outcome(
                        Status.UNKNOWN,
                        f"did not finish within {slot.check.timeout_s * timeout_scale:g}s",
                        {"timed_out": True},
                    )
                else:
                    with self._lock:
                        self._inflight.pop(slot.check.id, None)
                    outcome = slot.outcome or Outcome(Status.UNKNOWN, "check produced nothing")
                results[slot.check.id] = _result(slot.check, outcome, elapsed)
        return [results[c.id] for c in self.checks if c.id in results]

    def _pre_outcome(
        self, check: Check, skip_set: Set[str], results: Dict[str, CheckResult]
    ) -> Optional[Outcome]:
        if check.id in skip_set:
            return Outcome(Status.SKIP, "skipped by configuration (--skip or skip:)")
        with self._lock:
            prior = self._inflight.get(check.id)
        if prior is not None and prior.thread.is_alive():
            return Outcome(
                Status.UNKNOWN,
                f"previous run still in progress after {time.monotonic() - prior.started:.0f}s",
                {"timed_out": True},
            )
        missing = [
            f"{req} ({results[req].status})"
            for req in check.requires
            if req in results and results[req].status not in OK_FOR_DEPENDENTS
        ]
        if missing:
            needs = {"needs": list(check.requires)}
            return Outcome(Status.SKIP, "needs " + ", ".join(missing), needs)
        return None


def _result(check: Check, outcome: Outcome, duration: float) -> CheckResult:
    return CheckResult(
        id=check.id,
        title=check.title,
        severity=check.severity,
        status=outcome.status,
        summary=" ".join(outcome.summary.split()) or "(no summary)",
        remediation=outcome.remediation or check.remediation,
        gates=check.gates,
        details=dict(outcome.details),
        duration_s=round(duration, 6),
    )
