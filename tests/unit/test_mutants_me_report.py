"""Gate evaluation and the Report (agent/report.py), rule by rule, as its docstrings state them:
a path's gate closes on a critical check that gates the path and is fail or unknown (warn does
not), strict adds any gating check that is warn, fail or unknown; each path uses the check's
verdict on that path (CheckResult.status_on); a per-GPU health that tolerates the unhealthy
GPUs on a path drops the results it attributes to them, unless the result decides
differently on that path. Then what build_report and pending_report carry, the defaults, and
the consecutive open runs (count_opens). Expected values are written by hand from those rules.
"""
from types import MappingProxyType
from typing import Any, Dict, Optional

import pytest

from agent.gpu_health import GpuHealth, GpuState
from agent.model import (
    ALL_PATHS,
    Check,
    CheckResult,
    Interval,
    PathOutcome,
    Severity,
    Status,
    passed,
)
from agent.report import (
    Gate,
    KnownCheck,
    NodeFacts,
    Report,
    RunFacts,
    build_report,
    count_opens,
    evaluate_gate,
    pending_report,
)


def _res(cid: str, status: Status, severity: Severity = Severity.CRITICAL,
         gates=ALL_PATHS, by_path: Optional[Dict[str, Status]] = None,
         details: Optional[Dict[str, Any]] = None) -> CheckResult:
    return CheckResult(
        id=cid, title=cid, severity=severity, status=status, summary=f"{cid} {status.value}",
        remediation="-", gates=tuple(gates), details=dict(details or {}), duration_s=0.0,
        by_path={p: PathOutcome(s, f"{cid} on {p}", "-") for p, s in (by_path or {}).items()})


# -- evaluate_gate: the closing rule -------------------------------------------------------------
@pytest.mark.parametrize("status,closes", [
    (Status.PASS, False), (Status.WARN, False), (Status.FAIL, True), (Status.UNKNOWN, True),
    (Status.SKIP, False)])
def test_a_critical_check_closes_the_gate_on_fail_and_unknown_only(status, closes):
    gate = evaluate_gate([_res("c", status)], "dra")
    assert gate == Gate("dra", not closes, ("c",) if closes else ())


@pytest.mark.parametrize("status", list(Status))
def test_a_warning_check_never_closes_without_strict(status):
    gate = evaluate_gate([_res("w", status, Severity.WARNING)], "dra")
    assert gate == Gate("dra", True, ())


@pytest.mark.parametrize("severity", [Severity.WARNING, Severity.CRITICAL])
@pytest.mark.parametrize("status,closes", [
    (Status.PASS, False), (Status.WARN, True), (Status.FAIL, True), (Status.UNKNOWN, True),
    (Status.SKIP, False)])
def test_strict_closes_on_warn_fail_and_unknown_of_any_severity(severity, status, closes):
    gate = evaluate_gate([_res("s", status, severity)], "device-plugin", strict=True)
    assert gate == Gate("device-plugin", not closes, ("s",) if closes else ())


def test_a_check_that_does_not_gate_the_path_never_closes_it():
    results = [_res("elsewhere", Status.FAIL, gates=("dra",)),
               _res("strict-elsewhere", Status.WARN, Severity.WARNING, gates=("dra",))]
    assert evaluate_gate(results, "device-plugin", strict=True) == Gate(
        "device-plugin", True, ())
    assert evaluate_gate(results, "dra", strict=True).blocking == (
        "elsewhere", "strict-elsewhere")


def test_each_path_uses_the_checks_verdict_on_that_path():
    # The report path passes; on operator-gpucluster the same check fails; on dra it warns.
    r = _res("m", Status.PASS, by_path={"operator-gpucluster": Status.FAIL,
                                        "dra": Status.WARN})
    assert evaluate_gate([r], "device-plugin") == Gate("device-plugin", True, ())
    assert evaluate_gate([r], "operator-gpucluster") == Gate("operator-gpucluster", False, ("m",))
    assert evaluate_gate([r], "dra") == Gate("dra", True, ())
    assert evaluate_gate([r], "dra", strict=True) == Gate("dra", False, ("m",))
    # and the other way round: failing on the report's path, passing on another
    f = _res("f", Status.FAIL, by_path={"dra": Status.PASS})
    assert evaluate_gate([f], "dra") == Gate("dra", True, ())
    assert evaluate_gate([f], "device-plugin").blocking == ("f",)


def test_blocking_lists_every_closing_check_in_result_order():
    results = [_res("z-last", Status.UNKNOWN), _res("ok", Status.PASS),
               _res("a-first", Status.FAIL), _res("warn", Status.WARN, Severity.WARNING)]
    assert evaluate_gate(results, "dra") == Gate("dra", False, ("z-last", "a-first"))
    assert evaluate_gate(results, "dra", True).blocking == ("z-last", "a-first", "warn")
    assert evaluate_gate([], "dra") == Gate("dra", True, ())


# -- evaluate_gate: per-GPU health ---------------------------------------------------------------
def _gpu(i: int, failing=()) -> GpuState:
    return GpuState(index=i, uuid=f"GPU-{i}", pci_bus_id=None, in_nvml=True,
                    failing=tuple(failing))


def _health(min_healthy: Optional[int], attributed=("gpu-xid",), bad=(1,), n=4) -> GpuHealth:
    gpus = tuple(_gpu(i, attributed if i in bad else ()) for i in range(n))
    return GpuHealth(gpus=gpus, min_healthy=min_healthy, attributed=tuple(attributed))


def test_tolerated_gpus_drop_the_results_attributed_to_them_on_a_device_plugin_path():
    health = _health(3)  # one of four GPUs down, three required: tolerated
    assert health.tolerates_on("device-plugin") and not health.tolerates_on("dra")
    results = [_res("gpu-xid", Status.FAIL), _res("driver-loaded", Status.FAIL)]
    assert evaluate_gate(results, "device-plugin", health=health) == Gate(
        "device-plugin", False, ("driver-loaded",))
    assert evaluate_gate(results[:1], "device-plugin", health=health) == Gate(
        "device-plugin", True, ())
    assert evaluate_gate(results[:1], "operator-clusterpolicy", health=health).open
    # on DRA paths nothing is tolerated
    assert evaluate_gate(results[:1], "dra", health=health) == Gate("dra", False, ("gpu-xid",))
    assert evaluate_gate(results[:1], "operator-gpucluster", health=health).blocking == (
        "gpu-xid",)
    # without health, or with health that does not tolerate (every GPU required), it closes
    assert evaluate_gate(results[:1], "device-plugin").blocking == ("gpu-xid",)
    assert evaluate_gate(results[:1], "device-plugin", health=_health(None)).blocking == (
        "gpu-xid",)


def test_a_result_deciding_differently_on_the_path_is_not_dropped_by_health():
    # gpu-xid passes on the report's path but fails on device-plugin: its failure there is not
    # the per-GPU verdict the health weighed, so it still closes.
    health = _health(3)
    r = _res("gpu-xid", Status.PASS, by_path={"device-plugin": Status.FAIL})
    assert evaluate_gate([r], "device-plugin", health=health) == Gate(
        "device-plugin", False, ("gpu-xid",))
    same = _res("gpu-xid", Status.FAIL, by_path={"device-plugin": Status.FAIL})
    assert evaluate_gate([same], "device-plugin", health=health).open


# -- build_report ---------------------------------------------------------------------------------
def _check(cid: str, severity: Severity, interval: Interval) -> Check:
    return Check(id=cid, title=cid, severity=severity, gates=("dra",), interval=interval,
                 remediation="fix it", run=lambda h, p: passed("ok"))


def test_build_report_carries_every_field_and_a_gate_per_path():
    results = [_res("a", Status.FAIL, gates=("dra",)), _res("b", Status.PASS)]
    ctx = {"bundle": "x"}
    run = RunFacts(last_success=3.0)
    rep = build_report(results, "device-plugin", True, "node-1", 12.5, "9.9",
                       context=ctx, checks=[_check("a", Severity.CRITICAL, Interval.FAST)],
                       gpus={"gpus": []}, nvml_stats={"timeouts": 1},
                       xid_counts={("0", "79"): 2}, run=run, policy_version=2)
    assert (rep.path, rep.strict, rep.host, rep.generated_at, rep.agent_version) == (
        "device-plugin", True, "node-1", 12.5, "9.9")
    assert rep.results == tuple(results) and isinstance(rep.results, tuple)
    assert set(rep.gates) == set(ALL_PATHS)
    assert rep.gates["dra"] == Gate("dra", False, ("a",))
    for p in ("device-plugin", "operator-clusterpolicy", "operator-gpucluster"):
        assert rep.gates[p] == Gate(p, True, ())
    assert rep.gate is rep.gates["device-plugin"]
    assert rep.policy_version == 2
    assert dict(rep.context) == ctx and rep.context is not ctx
    assert rep.checks == (KnownCheck("a", Severity.CRITICAL, Interval.FAST),)
    assert dict(rep.gpus or {}) == {"gpus": []} and dict(rep.nvml_stats) == {"timeouts": 1}
    assert dict(rep.xid_counts) == {("0", "79"): 2} and rep.run is run
    assert rep.trigger == "schedule"
    assert rep.health is not None and rep.health.gpus == ()
    ctx["bundle"] = "changed"
    assert rep.context == {"bundle": "x"}


def test_build_report_defaults():
    rep = build_report([], "dra", False, "h", 0.0, "v")
    assert rep.gate == Gate("dra", True, ()) and rep.context == {}
    assert rep.policy_version is None and rep.checks == () and rep.gpus is None
    assert dict(rep.nvml_stats) == {} and dict(rep.xid_counts) == {}
    assert rep.run == RunFacts()
    assert rep.health is not None and rep.health.min_healthy is None


def _snap(n: int) -> Dict[str, Any]:
    return {"schema_version": 1, "source": "nvml", "error": None, "device_count": n,
            "gpus": [{"index": i, "uuid": f"GPU-{i}"} for i in range(n)]}


def test_build_report_weighs_min_healthy_gpus_in_every_paths_gate():
    # gpu-xid (fenced by the device plugin) names GPU 2 of 8: with a minimum of 7 the
    # device-plugin paths stay open, the DRA paths close; "all" (None) closes every path.
    results = [_res("gpu-xid", Status.FAIL, details={"gpus_at_fault": [{"index": 2,
                                                                        "uuid": "GPU-2"}]})]
    tolerant = build_report(results, "device-plugin", False, "h", 0.0, "v", gpus=_snap(8),
                            min_healthy_gpus=7)
    assert tolerant.health is not None and tolerant.health.min_healthy == 7
    assert tolerant.gate == Gate("device-plugin", True, ())
    assert tolerant.gates["operator-clusterpolicy"].open
    assert tolerant.gates["dra"] == Gate("dra", False, ("gpu-xid",))
    assert tolerant.gates["operator-gpucluster"].blocking == ("gpu-xid",)
    strictest = build_report(results, "device-plugin", False, "h", 0.0, "v", gpus=_snap(8))
    assert strictest.gate == Gate("device-plugin", False, ("gpu-xid",))
    # the health is the report path's and strict flag's: strict counts a warning's GPU
    warn = [_res("gpu-xid", Status.WARN, details={"gpus_at_fault": [{"index": 1,
                                                                     "uuid": "GPU-1"}]})]
    strict = build_report(warn, "device-plugin", True, "h", 0.0, "v", gpus=_snap(8),
                          min_healthy_gpus=7)
    assert strict.health is not None and [g.index for g in strict.health.unhealthy] == [1]
    assert strict.gate.open


# -- Report.result, RunFacts, NodeFacts, Report defaults ------------------------------------------
def test_result_finds_a_check_by_id_or_none():
    a, b = _res("a", Status.PASS), _res("b", Status.FAIL)
    rep = build_report([a, b], "dra", False, "h", 0.0, "v")
    assert rep.result("b") is b and rep.result("a") is a
    assert rep.result("c") is None


def test_run_facts_defaults_and_a_read_only_copy_of_last_run():
    facts = RunFacts()
    assert (facts.last_success, facts.cycle_duration, facts.config_reload_ok,
            facts.start_time, facts.node) == (None, None, True, 0.0, None)
    assert dict(facts.last_run) == {}
    mine = {"driver-loaded": 5.0}
    kept = RunFacts(last_run=mine)
    mine["driver-loaded"] = 9.0
    mine["gpu-xid"] = 1.0
    assert dict(kept.last_run) == {"driver-loaded": 5.0}
    assert isinstance(kept.last_run, MappingProxyType)
    with pytest.raises(TypeError):
        kept.last_run["x"] = 1.0  # type: ignore[index]


def test_node_facts_defaults():
    assert NodeFacts() == NodeFacts(cordoned=None, publish_ok=False, last_success=None)


def test_report_defaults_for_fields_not_given():
    rep = Report(path="dra", strict=False, results=(), gate=Gate("dra", True, ()), gates={},
                 host="h", generated_at=0.0, agent_version="v")
    assert rep.context == {} and rep.checks == () and rep.gpus is None
    assert dict(rep.nvml_stats) == {} and dict(rep.xid_counts) == {}
    assert rep.run == RunFacts() and rep.policy_version is None
    assert rep.trigger == "schedule" and rep.health is None


def test_pending_report_passes_a_non_mapping_snapshot_through():
    assert pending_report("dra", "h", "v", gpus=None).gpus is None


# -- count_opens -----------------------------------------------------------------------------------
class _Rep:
    def __init__(self, open_: bool, trigger: Optional[str] = None) -> None:
        self.gate = Gate("dra", open_, () if open_ else ("x",))
        if trigger is not None:
            self.trigger = trigger


@pytest.mark.parametrize("opens,open_,trigger,want", [
    (0, True, "schedule", 1), (4, True, "schedule", 5), (4, True, "event", 4),
    (4, False, "schedule", 0), (4, False, "event", 0), (0, False, None, 0),
    (2, True, None, 3),  # a report without a trigger counts as scheduled
])
def test_count_opens(opens, open_, trigger, want):
    assert count_opens(opens, _Rep(open_, trigger)) == want
