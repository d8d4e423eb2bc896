"""What makes one check's verdict per allocation path honest (agent/engine.py runs it).

A check is evaluated first for the report's path through a PathWatch, which notes whether the
check read ``policy.path`` at all; only a check that did is evaluated again for the other
paths, with the policy resolved for each. The host it sees is a Recorder: the first
evaluation's command answers and live facts are recorded and replayed to the later ones, so
one verdict never mixes two moments of the host. The Recorder also notes each source the host
could not give (never captured), so the fix can say how to capture it.
"""
import copy
from typing import Any, Dict, List, Optional, Sequence, Tuple

from agent.hostview import HostView


def policy_for_path(policy: Any, path: str) -> Any:
    """``policy`` resolved for another allocation path: its own ``for_path`` if it has one,
    else a shallow copy with ``path`` replaced (a ResolvedPolicy holds nothing else that
    depends on the path)."""
    if getattr(policy, "path", None) == path:
        return policy
    maker = getattr(policy, "for_path", None)
    if callable(maker):
        return maker(path)
    clone = copy.copy(policy)
    clone.path = path
    return clone


class PathWatch:
    """Hands a check its policy and notes whether the check read ``path``: a verdict that
    never looked at the path is the same on every path."""

    def __init__(self, policy: Any) -> None:
        self._gna_policy = policy
        self._gna_read_path = False

    def __getattr__(self, name: str) -> Any:
        if name == "path":
            self._gna_read_path = True
        return getattr(self._gna_policy, name)


class Recorder:
    """The host as the first evaluation saw it: command answers are recorded, and a later
    evaluation of the same check (another path) gets the same answers in the same order.
    It also notes every source the host could not give because it was never captured (a
    command a bundle did not record, no kernel log, no GPU snapshot, a fact left null), so
    the fix for such a result can say how to capture it rather than how to repair a host."""

    def __init__(self, host: HostView, missing: Optional[List[str]] = None) -> None:
        self._gna_host = host
        self._gna_answers: Dict[Tuple[str, ...], List[Any]] = {}
        self._gna_replay: Optional[Dict[Tuple[str, ...], List[Any]]] = None
        # Live facts as the first evaluation saw them (an API read, a sysfs walk): replayed.
        self._gna_facts: Dict[str, Any] = {}
        self.gna_missing: List[str] = missing if missing is not None else []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._gna_host, name)

    def _gna_note(self, what: str) -> None:
        if what not in self.gna_missing:
            self.gna_missing.append(what)

    def run(self, argv: Sequence[str], timeout: float = 10.0) -> Any:
        key = tuple(argv)
        if self._gna_replay is not None and self._gna_replay.get(key):
            answer = self._gna_replay[key].pop(0)
        else:
            answer = self._gna_host.run(argv, timeout)
            if self._gna_replay is None:
                self._gna_answers.setdefault(key, []).append(answer)
        if getattr(answer, "not_recorded", False):
            self._gna_note(f"`{' '.join(key)}`")
        return answer

    def kmsg(self) -> Any:
        lines = self._gna_host.kmsg()
        if lines is None:
            self._gna_note("the kernel log")
        return lines

    def gpus(self) -> Any:
        snap = self._gna_host.gpus()
        if snap is None:
            self._gna_note("the GPU snapshot")
        return snap

    def fact(self, name: str) -> Any:
        if name in self._gna_facts:
            value = self._gna_facts[name]
        else:
            value = self._gna_facts[name] = self._gna_host.fact(name)
        if value is None:
            self._gna_note(f"the {name} fact")
        return value

    def replaying(self) -> "Recorder":
        again = Recorder(self._gna_host, self.gna_missing)
        again._gna_replay = {k: list(v) for k, v in self._gna_answers.items()}
        again._gna_facts = dict(self._gna_facts)
        return again
