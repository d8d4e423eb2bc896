"""A command source for check tests: the seam's `run(argv, timeout) -> CommandResult`
(agent/hostview.py) answered from a table, for every check test that replays commands."""
from typing import Any, Dict, List, Optional, Sequence, Tuple

from agent.hostview import CommandResult


class Answers:
    """Replays commands by argv. An argv the table lacks is answered as a bundle answers one it
    did not record (agent/host/bundle.py, RecordedCommands: rc -1, not_recorded). Every call is
    kept in `calls` as (argv, timeout), so a test can say what was asked, in which order."""

    def __init__(self, answers: Optional[Dict[Tuple[str, ...], CommandResult]] = None) -> None:
        self.answers = {} if answers is None else answers
        self.calls: List[Tuple[Tuple[str, ...], Any]] = []

    def run(self, argv: Sequence[str], timeout: float) -> CommandResult:
        self.calls.append((tuple(argv), timeout))
        found = self.answers.get(tuple(argv))
        return found or CommandResult(tuple(argv), -1, "", "not recorded", not_recorded=True)


class OneAnswer:
    """One canned answer for every argv; without one, every argv is answered "not recorded" as
    above. Every call is kept in `calls` as (argv, timeout)."""

    def __init__(self, result: Optional[CommandResult] = None) -> None:
        self.result = result
        self.calls: List[Tuple[Tuple[str, ...], Any]] = []

    def run(self, argv: Sequence[str], timeout: float) -> CommandResult:
        self.calls.append((tuple(argv), timeout))
        if self.result is None:
            return CommandResult(tuple(argv), -1, "", "not recorded", not_recorded=True)
        return self.result
