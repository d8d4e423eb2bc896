"""The metrics renderer (agent/outputs/metrics.py) on a malformed GPU snapshot, malformed check
details and odd XID counter keys: it never raises (a raise here would break every `run`
cycle), and what it renders is an exposition Prometheus' own parser reads."""
import math
from typing import Any, Dict

from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from agent.model import CheckResult, Severity, Status
from agent.outputs.metrics import render
from agent.report import build_report
from checks.registry import ALL_CHECKS
from tests.fuzz.conftest import deep, expect, quick
from tests.fuzz.strategies import FLOATS, INTS, JSON, NASTY, SNAPSHOT
from tests.unit.metrics_fixtures import run_report

DETAILS = st.fixed_dictionaries({}, optional={
    "offset_s": st.one_of(FLOATS, INTS, JSON), "synced": JSON, "version": st.one_of(NASTY, JSON)})
XID_KEYS = st.tuples(st.one_of(st.sampled_from(["0", "7", "0000:9b:00", "²", "9" * 5000]), NASTY),
                     st.one_of(st.sampled_from(["79", "48", "١", "9" * 5000]), NASTY))
CASES = st.tuples(
    SNAPSHOT,
    st.dictionaries(st.sampled_from(["time-sync", "driver-branch", "toolkit-version"]),
                    st.tuples(st.sampled_from(list(Status)), DETAILS), max_size=3),
    st.dictionaries(XID_KEYS, st.one_of(st.integers(0, 10**6), INTS), max_size=3),
    st.fixed_dictionaries({}, optional={"timeouts": st.integers(0, 10**6)}),
    st.one_of(st.none(), FLOATS),
)


def _result(cid: str, status: Status, details: Dict[str, Any]) -> CheckResult:
    return CheckResult(cid, cid, Severity.CRITICAL, status, "s", "r", ("dra",), details, 0.01)


def metrics(case: Any) -> None:
    snapshot, results, xids, stats, duration = case
    report = build_report([_result(cid, status, details)
                           for cid, (status, details) in results.items()],
                          "dra", False, "fuzz", 1700000000.0, "0.0.0")
    body = render(run_report(
        checks=ALL_CHECKS, version="0.0.0", path="dra", report=report, gpus=snapshot,
        nvml_stats=stats, xid_counts=xids, last_success=1700000000.0,
        cycle_duration=duration if duration is None or math.isfinite(duration) else None,
        start_time=1700000000.0))
    expect(isinstance(body, bytes), "render returned", type(body))
    try:
        text = body.decode("utf-8")
        families = list(text_string_to_metric_families(text))
    except (UnicodeDecodeError, ValueError, TypeError, IndexError) as exc:
        raise AssertionError(f"exposition does not parse: {exc}") from None
    expect(any(f.name == "gpu_node_agent_gate_open" for f in families), "no gate_open family")


def _strict(case: Any) -> None:
    try:
        metrics(case)
    except AssertionError as exc:
        from tests.fuzz.conftest import Violation
        raise Violation(str(exc)) from None


test_metrics_quick = quick(CASES, _strict)
test_metrics_deep = deep("metrics renderer", CASES, _strict)
