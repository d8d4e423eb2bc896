"""Inputs for the metrics tests: a few checks with the details the real checks write, and a
two-GPU snapshot in docs/gpu-snapshot.md's schema (the shape agent/nvml/worker.py returns).
Values are chosen here; the tests compare the exposition against these inputs."""
import copy
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from agent.engine import Engine
from agent.model import Check, Interval, Severity, failed, passed, unknown, warned
from agent.report import NodeFacts, Report, RunFacts, build_report, pending_report


def _check(cid: str, outcome: Any, interval: Interval = Interval.FAST,
           severity: Severity = Severity.CRITICAL) -> Check:
    return Check(id=cid, title=cid, severity=severity, gates=("dra", "device-plugin"),
                 interval=interval, remediation="fix it", run=lambda h, p: outcome)


CHECKS: List[Check] = [
    _check("driver-branch", passed("ok", version="580.95.05"), Interval.SLOW),
    _check("toolkit-version", passed("ok", version="1.18.0"), Interval.SLOW,
           Severity.WARNING),
    _check("time-sync", warned("offset big", offset_s=0.25)),
    _check("gpu-xid", failed("xid 79", xid_counts={"0:79": 2, "1:13": 1,
                                                   "0000:cb:00.0:48": 1})),
    _check("nvml-responsive", unknown("did not answer")),
]

GPU: Dict[str, Any] = {
    "index": 0, "uuid": 'GPU-aaaa"\\x', "name": "NVIDIA H100 80GB HBM3",
    "pci_bus_id": "00000000:1A:00.0",
    "memory": {"total_bytes": 85899345920, "used_bytes": 1073741824},
    "temperature": {"gpu_c": 41, "slowdown_c": 87, "shutdown_c": 92},
    "ecc": {"mode_current": True, "mode_pending": True,
            "volatile": {"corrected": 3, "uncorrected": 1},
            "aggregate": {"corrected": 30, "uncorrected": 2}},
    "remapped_rows": {"correctable": 4, "uncorrectable": 1, "pending": True, "failure": False},
    "clock_event_reasons": {"mask": 0x48, "active": ["hw_slowdown", "hw_thermal_slowdown"]},
    "pcie": {"gen_current": 1, "gen_max": 5, "width_current": 8, "width_max": 16},
    "nvlink": {"supported": True, "links": [{"link": i, "active": i != 3} for i in range(18)]},
    "mig": {"current": "disabled", "pending": "enabled"},
    "fabric": {"state": "completed", "status": "success", "status_code": 0, "clique_id": 1},
    "persistence_mode": True,
    "errors": {},
}


def snapshot() -> Dict[str, Any]:
    second = copy.deepcopy(GPU)
    second.update(index=1, uuid="GPU-bbbb", pci_bus_id="00000000:1B:00.0",
                  persistence_mode=False, error={"kind": "gpu_lost", "message": "lost"})
    second["temperature"]["gpu_c"] = 55
    second["nvlink"] = {"supported": False, "links": []}
    return {"schema_version": 1, "source": "nvml", "error": None, "driver_version": "580.95.05",
            "gpus": [copy.deepcopy(GPU), second]}


def report(checks: List[Check] = CHECKS) -> Any:
    results = Engine(checks).run(None, None)
    return build_report(results, "dra", False, "test host", 1700000000.0, "1.2.3")


def run_report(checks: Sequence[Check], version: str, path: str, report: Optional[Report] = None,
               last_run: Optional[Mapping[str, float]] = None,
               gpus: Optional[Mapping[str, Any]] = None,
               nvml_stats: Optional[Mapping[str, int]] = None,
               xid_counts: Optional[Mapping[Tuple[str, str], int]] = None,
               last_success: Optional[float] = None, cycle_duration: Optional[float] = None,
               config_reload_ok: bool = True, start_time: float = 0.0,
               node: Optional[NodeFacts] = None) -> Report:
    """The Report `run` would hand its outputs: ``report``'s verdicts (None: before the first
    cycle) with what the daemon adds (agent/daemon/service.py _compose)."""
    extras: Dict[str, Any] = dict(
        checks=checks, gpus=gpus, nvml_stats=nvml_stats, xid_counts=xid_counts,
        run=RunFacts(last_run=last_run or {}, last_success=last_success,
                     cycle_duration=cycle_duration, config_reload_ok=config_reload_ok,
                     start_time=start_time, node=node))
    if report is None:
        return pending_report(path, "test host", version, **extras)
    return build_report(report.results, path, report.strict, report.host, report.generated_at,
                        version, **extras)
