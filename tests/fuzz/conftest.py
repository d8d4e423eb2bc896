"""The fuzz tier: every parser of hostile input, driven by hypothesis.

Two sizes of the same properties:
- quick (default, runs with the normal suite): ``QUICK`` cases per parser, derandomized (the
  same cases every run), no deadline, no example database; the first escape fails the test
  and hypothesis shrinks it to a minimal input.
- deep (``@pytest.mark.fuzz``): ``GNA_FUZZ_EXAMPLES`` cases per parser (10,000 for the
  recorded figures). Collected only when that variable is set, so the normal suite neither
  runs nor skips them. Every case runs; escapes are counted, the first few distinct ones are
  shown, and the test fails unless there are none. With ``GNA_FUZZ_REPORT=FILE`` each
  parser's figures (cases, escapes, contract violations) are appended to FILE as JSON lines.

An *escape* is an exception other than the parser's own error type (tests/fuzz/README.md
lists the type per parser); a *violation* is a result that breaks the parser's contract
(a check status outside pass/warn/fail/unknown/skip, an exposition Prometheus cannot parse).
"""
import json
import os
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest
from hypothesis import HealthCheck, given, settings

QUICK = 200
ENV = "GNA_FUZZ_EXAMPLES"
REPORT_ENV = "GNA_FUZZ_REPORT"


def deep_examples() -> int:
    return int(os.environ.get(ENV, "0") or 0)


def pytest_collection_modifyitems(config: Any, items: List[Any]) -> None:
    if deep_examples() > 0:
        return
    here = os.path.dirname(__file__)
    keep, drop = [], []
    for item in items:
        in_fuzz = str(getattr(item, "fspath", "")).startswith(here)
        (drop if in_fuzz and item.get_closest_marker("fuzz") else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


_COMMON: Dict[str, Any] = dict(
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)


class Violation(AssertionError):
    """The call returned, but what it returned breaks the parser's contract."""


class Tally:
    """Counts cases, escapes and violations of one parser (deep tier)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.cases = 0
        self.escapes = 0
        self.violations = 0
        self.samples: Dict[Tuple[str, str], str] = {}

    def note(self, kind: str, exc: BaseException, data: Any) -> None:
        key = (kind, f"{type(exc).__name__}: {str(exc)[:120]}")
        if len(self.samples) < 12 and key not in self.samples:
            self.samples[key] = repr(data)[:300]

    def summary(self) -> str:
        lines = [f"{self.name}: {self.cases} cases, {self.escapes} escapes, "
                 f"{self.violations} contract violations"]
        for (kind, what), data in self.samples.items():
            lines.append(f"  {kind}: {what}\n    input: {data}")
        return "\n".join(lines)

    def record(self) -> None:
        path = os.environ.get(REPORT_ENV)
        if path:
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps({"parser": self.name, "cases": self.cases,
                                     "escapes": self.escapes,
                                     "violations": self.violations}) + "\n")


def quick(strategy: Any, target: Callable[[Any], None]) -> Callable[[], None]:
    """The quick-tier test: the first escape or violation fails and is shrunk."""

    @settings(max_examples=QUICK, **_COMMON)
    @given(strategy)
    def run(data: Any) -> None:
        target(data)

    return run


def deep(name: str, strategy: Any, target: Callable[[Any], None]) -> Callable[[], None]:
    """The deep-tier test: every case runs, escapes and violations are counted. ``target``
    catches the parser's own error type itself; anything else it raises is an escape."""

    def run_deep() -> None:
        tally = Tally(name)

        @settings(max_examples=deep_examples(), **_COMMON)
        @given(strategy)
        def run(data: Any) -> None:
            tally.cases += 1
            try:
                target(data)
            except Violation as exc:
                tally.violations += 1
                tally.note("violation", exc, data)
            except Exception as exc:
                tally.escapes += 1
                tally.note("escape", exc, data)

        run()
        tally.record()
        print(tally.summary())
        assert tally.escapes == 0 and tally.violations == 0, tally.summary()

    return pytest.mark.fuzz(run_deep)


def expect(cond: bool, message: str, detail: Optional[Any] = None) -> None:
    if not cond:
        raise Violation(message + ("" if detail is None else f": {detail!r}"[:300]))
