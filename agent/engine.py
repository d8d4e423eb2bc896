"""The engine: runs checks (given as an argument; it never imports the registry).

Each check runs in its own daemon thread with a deadline. Past it the check is `unknown`,
and while that thread is still alive the check is not started again, so a check that hangs
costs one thread, never one per cycle. An exception becomes `unknown` with its type in the
summary. A check whose `requires` did not pass is `skip` (`needs:<id>`) naming what it needs.

Per-path truth: a check that reads ``policy.path`` while it decides (driver-branch's minimum,
the allocation owner the path expects) is evaluated again for every other allocation path,
with the policy resolved for that path, and the differences are kept on the result
(``CheckResult.by_path``). Every path's gate is then what ``--path P`` alone would decide,
at the cost of re-running only the checks whose verdict depends on the path. The extra
evaluations see the same command answers as the first (recorded, then replayed), so one
verdict never mixes two moments of the host.
"""
import threading
import time
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple

from agent.engine_replay import PathWatch, Recorder, policy_for_path
from agent.engine_result import result_of
from agent.errors import AgentError
from agent.hostview import HostView
from agent.model import (
    PATHS,
    SKIP_CONFIGURED,
    SKIP_NOT_APPLICABLE,
    Check,
    CheckResult,
    Outcome,
    Status,
    needs_kind,
)

OK_FOR_DEPENDENTS = (Status.PASS, Status.WARN)


class RegistryError(AgentError):
    """The checks handed to the engine do not form a registry (a duplicate id, an unknown
    requirement, a cycle): the agent's own bug, internal (exit 3)."""


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
    """One check's execution: a thread evaluating it for one or more paths."""

    def __init__(
        self, check: Check, host: Optional[HostView], policy: Any, paths: Sequence[Any]
    ) -> None:
        self.check = check
        self.paths = list(paths)
        self.outcomes: Dict[Any, Outcome] = {}
        self.missing: List[str] = []
        self.started = time.monotonic()
        self.thread = threading.Thread(
            target=self._body, args=(host, policy), name=f"check:{check.id}", daemon=True
        )

    def _once(self, host: Optional[HostView], policy: Any) -> Outcome:
        try:
            # No host (None) only where the checks read none: the engine's own tests.
            outcome = self.check.run(host, policy)  # type: ignore[arg-type]
            if not isinstance(outcome, Outcome):
                raise TypeError(f"returned {type(outcome).__name__}, not an Outcome")
            return outcome
        except Exception as exc:  # a check must not raise; the engine contains it if it does
            text = str(exc).splitlines()[0][:200] if str(exc) else ""
            return Outcome(
                Status.UNKNOWN,
                f"check raised {type(exc).__name__}" + (f": {text}" if text else ""),
                {"exception": type(exc).__name__},
            )

    def _body(self, host: Optional[HostView], policy: Any) -> None:
        first, rest = self.paths[0], self.paths[1:]
        if host is None or first is None:
            for path in self.paths:
                self.outcomes[path] = self._once(
                    host, policy if path is None else policy_for_path(policy, path)
                )
            return
        recorder = Recorder(host, self.missing)
        watch = PathWatch(policy_for_path(policy, first))
        outcome = self._once(recorder, watch)
        self.outcomes[first] = outcome
        for path in rest:
            if watch._gna_read_path:
                self.outcomes[path] = self._once(
                    recorder.replaying(), policy_for_path(policy, path)
                )
            else:
                self.outcomes[path] = outcome


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
        host: Optional[HostView],
        policy: Any,  # checks.policy.ResolvedPolicy: the core cannot import the checks
        only: Optional[Iterable[str]] = None,
        skip: Iterable[str] = (),
        timeout_scale: float = 1.0,
    ) -> List[CheckResult]:
        """Results for ``policy.path`` (each carrying where another path decides
        differently). A policy without a ``path`` is evaluated once, for every path."""
        selected = closure(self.checks, only) if only is not None else self.checks
        selected_ids = {c.id for c in selected}
        skip_set = set(skip)
        main = getattr(policy, "path", None) if policy is not None else None
        paths: List[Any] = [main] + [p for p in PATHS if p != main] if main in PATHS else [None]
        results: Dict[str, CheckResult] = {}
        # Set by the composition root on a bundle or a bare tree: how to capture what it lacks.
        capture_hint = getattr(host, "capture_hint", None) if host is not None else None
        for wave in self._waves:
            pending: List[Tuple[_Slot, Dict[Any, Outcome]]] = []
            for check in wave:
                if check.id not in selected_ids:
                    continue
                early = self._pre_outcome(check, skip_set, policy)
                if early is not None:
                    results[check.id] = result_of(check, {p: early for p in paths}, paths, 0.0)
                    continue
                pre: Dict[Any, Outcome] = {}
                for path in paths:
                    needed = _needs(check, results, path)
                    if needed is not None:
                        pre[path] = needed
                to_run = [p for p in paths if p not in pre]
                if not to_run:
                    results[check.id] = result_of(check, pre, paths, 0.0)
                    continue
                slot = _Slot(check, host, policy, to_run)
                with self._lock:
                    self._inflight[check.id] = slot
                slot.thread.start()
                pending.append((slot, pre))
            for slot, pre in pending:
                deadline = slot.started + slot.check.timeout_s * timeout_scale
                slot.thread.join(max(0.0, deadline - time.monotonic()))
                elapsed = time.monotonic() - slot.started
                outcomes = dict(pre)
                if slot.thread.is_alive():
                    late = Outcome(
                        Status.UNKNOWN,
                        f"did not finish within {slot.check.timeout_s * timeout_scale:g}s",
                        {"timed_out": True},
                    )
                    outcomes.update({p: late for p in slot.paths})
                else:
                    with self._lock:
                        self._inflight.pop(slot.check.id, None)
                    for path in slot.paths:
                        outcomes[path] = slot.outcomes.get(path) or Outcome(
                            Status.UNKNOWN, "check produced nothing"
                        )
                results[slot.check.id] = result_of(
                    slot.check, outcomes, paths, elapsed, slot.missing, capture_hint
                )
        return [results[c.id] for c in self.checks if c.id in results]

    def _pre_outcome(self, check: Check, skip_set: Set[str], policy: Any) -> Optional[Outcome]:
        if check.id in skip_set:
            return Outcome(
                Status.SKIP, "skipped by configuration (--skip or skip:)", skip=SKIP_CONFIGURED
            )
        version = policy_version_of(policy)
        if version is not None and version < check.since_policy:
            return Outcome(
                Status.SKIP,
                f"a gate of policy version {check.since_policy}; this config pins "
                f"policy_version {version}",
                {"since_policy": check.since_policy, "policy_version": version},
                skip=SKIP_NOT_APPLICABLE,
            )
        with self._lock:
            prior = self._inflight.get(check.id)
        if prior is not None and prior.thread.is_alive():
            return Outcome(
                Status.UNKNOWN,
                f"previous run still in progress after {time.monotonic() - prior.started:.0f}s",
                {"timed_out": True},
            )
        return None


def policy_version_of(policy: Any) -> Optional[int]:
    """The version of a checks.policy.ResolvedPolicy (None for a bare or absent policy: tests
    that run one check without a Policy)."""
    version = getattr(getattr(policy, "policy", None), "policy_version", None)
    return version if isinstance(version, int) else None


def _needs(check: Check, results: Dict[str, CheckResult], path: Any) -> Optional[Outcome]:
    """`skip needs:<id>` when a requirement is not pass/warn on ``path``."""
    missing = [
        (req, results[req].status if path is None else results[req].status_on(path))
        for req in check.requires
        if req in results
    ]
    missing = [(req, status) for req, status in missing if status not in OK_FOR_DEPENDENTS]
    if not missing:
        return None
    return Outcome(
        Status.SKIP,
        "needs " + ", ".join(f"{req} ({status})" for req, status in missing),
        {"needs": list(check.requires)},
        skip=needs_kind(missing[0][0]),
    )
