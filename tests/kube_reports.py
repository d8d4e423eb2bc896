"""Reports for the kube tests, built with the real report code from CheckResults."""
from typing import Any, Dict, Optional

from agent.config import Config
from agent.model import ALL_PATHS, CheckResult, Severity, Status
from agent.report import Report, build_report

CRITICAL = ("driver-loaded", "gpu-ecc", "gpu-xid", "allocation-owner")


def report(
    failing: Optional[Dict[str, str]] = None,
    path: str = "dra",
    in_use: Optional[Dict[str, int]] = None,
    status: Status = Status.FAIL,
) -> Report:
    """Every CRITICAL check passes except those in ``failing`` (id -> summary)."""
    failing = failing or {}
    results = []
    for cid in CRITICAL:
        details: Dict[str, Any] = {}
        if cid == "allocation-owner" and in_use is not None:
            # the shape checks/allocation/allocation_owner.py writes
            claims = [f"claim-{i}" for i in range(in_use.get("dra_claims", 0))]
            pods = [f"pod-{i}" for i in range(in_use.get("device_plugin_pods", 0))]
            details["in_use"] = {
                "current_boot_id": "b0", "gpus_in_use": bool(claims or pods),
                "dra": {"claims_prepared": claims}, "device_plugin": {"pods": pods},
            }
        bad = cid in failing
        results.append(CheckResult(
            id=cid, title=cid, severity=Severity.CRITICAL,
            status=status if bad else Status.PASS,
            summary=failing.get(cid, "ok"), remediation="fix it", gates=ALL_PATHS,
            details=details, duration_s=0.01,
        ))
    return build_report(results, path, False, "test host", 0.0, "0.0.0")


def config(**kube: Any) -> Config:
    data: Dict[str, Any] = {"kube": kube}
    return Config.model_validate(data)
