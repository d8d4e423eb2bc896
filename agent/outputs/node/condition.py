"""The condition the Report asks for (default GPUReady) and the facts of the Report the plan
weighs: GPUs in use, fatal faults. Pure. Reason: a CamelCase word as Kubernetes condition
reasons are (API conventions, "Typical status properties": `GateOpen`, `CheckFailed` when a
fail closes the gate, `CheckUnknown` when only unknowns do); message at most 200 characters
(the first blocking check, its summary cut to fit, how many others: the full list stays in
the JSON and the metrics). The rules: docs/kubernetes.md "What is written, and when"; the
patches: agent/outputs/node/reconcile.py.
"""

import re
from typing import Any, Dict, List, Mapping, Optional

from agent.model import Status

# `kubectl describe node` shows the message whole, one line per condition: keep it readable.
MESSAGE_LIMIT = 200
REASON_OPEN = "GateOpen"
REASON_FAILED = "CheckFailed"
REASON_UNKNOWN = "CheckUnknown"
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+")


def _one_line(text: str) -> str:
    return _CONTROL.sub(" ", text).strip()


def gpus_in_use(report: Any) -> Optional[int]:
    """How many holders (prepared DRA claims under the current boot id + pods holding
    nvidia.com devices) use GPUs through the allocation label; None = unknown.

    From allocation-owner's details["in_use"] (checks/allocation/allocation_owner.py): `gpus_in_use`
    True/False/None (None: a checkpoint unreadable or from an unverifiable boot), with
    `dra.claims_prepared` and `device_plugin.pods` listing the holders."""
    result = report.result("allocation-owner") if report is not None else None
    if result is None:
        return None
    in_use = (result.details or {}).get("in_use")
    if not isinstance(in_use, Mapping):
        return None
    verdict = in_use.get("gpus_in_use")
    if verdict is None:
        return None
    if verdict is False:
        return 0
    dra: Mapping[str, Any] = in_use.get("dra") or {}
    dp: Mapping[str, Any] = in_use.get("device_plugin") or {}
    if not isinstance(dra, Mapping) or not isinstance(dp, Mapping):
        return 1
    holders = len(dra.get("claims_prepared") or []) + len(dp.get("pods") or [])
    return max(1, holders)  # True with no list still means "in use"


def fatal_faults(report: Any, fatal_checks: List[str]) -> List[str]:
    """The fatal checks that fail, less those that only name GPUs while the healthy ones are
    enough (health.min_healthy_gpus: cordon only below the minimum; agent/gpu_health.py)."""
    health = getattr(report, "health", None)
    spared = set(health.attributed) if health is not None and health.tolerates_on(
        report.path) else set()
    return [
        c for c in fatal_checks
        if c not in spared and (r := report.result(c)) is not None and r.status == Status.FAIL
    ]


# The unhealthy-GPU annotation's bounds: Kubernetes caps a Node's annotations at 256 KiB in
# all (k8s.io/apimachinery pkg/api/validation/objectmeta.go TotalAnnotationSizeLimitB), shared
# with everyone else's; a GPU UUID is 40 characters ("GPU-" and 36), so 64 names of at most
# 64 characters keep the value under 4.2 KiB whatever a snapshot holds.
LISTED_MAX = 64
NAME_MAX = 64


def unhealthy_gpus_value(report: Any) -> Optional[str]:
    """The `<prefix>/unhealthy-gpus` annotation: the unhealthy GPUs' UUIDs (a PCI bus id for a
    GPU NVML does not list), sorted, comma-separated, ``+N`` last when more than LISTED_MAX;
    None (no annotation) when every GPU is healthy."""
    health = getattr(report, "health", None)
    if health is None:
        return None
    names = sorted({_one_line(g.name)[:NAME_MAX] for g in health.unhealthy})
    if not names:
        return None
    more = len(names) - LISTED_MAX
    return ",".join(names[:LISTED_MAX] + ([f"+{more}"] if more > 0 else []))


def desired_condition(report: Any, ctype: str) -> Dict[str, str]:
    gate = report.gate
    health = getattr(report, "health", None)
    if gate.open and health is not None and health.tolerates_on(report.path):
        # open with GPUs down (health.min_healthy_gpus): say so, the annotation lists them
        names = ", ".join(sorted(_one_line(g.name) for g in health.unhealthy))
        message = (f"gate {report.path} open: {health.healthy_count} of {len(health.gpus)} "
                   f"GPUs healthy (min_healthy_gpus {health.required}); unhealthy: {names}")
        cut = message if len(message) <= MESSAGE_LIMIT else message[: MESSAGE_LIMIT - 3] + "..."
        return {"type": ctype, "status": "True", "reason": REASON_OPEN, "message": cut}
    if gate.open:
        return {
            "type": ctype,
            "status": "True",
            "reason": REASON_OPEN,
            "message": f"gate {report.path} open: no critical check fails",
        }
    return {
        "type": ctype,
        "status": "False",
        "reason": closed_reason(report),
        "message": closed_message(report),
    }


def closed_reason(report: Any) -> str:
    """CheckUnknown only when every blocking check is unknown (the agent cannot see), else
    CheckFailed (a fail, or a warning under --strict, closes the gate)."""
    statuses = [getattr(report.result(c), "status", None) for c in report.gate.blocking]
    if statuses and all(s == Status.UNKNOWN for s in statuses):
        return REASON_UNKNOWN
    return REASON_FAILED


def closed_message(report: Any, limit: int = MESSAGE_LIMIT) -> str:
    """`<first blocking id> <status>: <summary>` cut to fit, then `; +N more blocking`."""
    blocking = list(report.gate.blocking)
    if not blocking:
        return _one_line(f"gate {report.path} closed")[:limit]
    first = blocking[0]
    r = report.result(first)
    head = f"{first} {r.status}: " if r is not None else f"{first}: "
    summary = _one_line(str(r.summary)) if r is not None else "blocking"
    others = len(blocking) - 1
    tail = f"; +{others} more blocking" if others else ""
    room = limit - len(head) - len(tail)
    if room < 4:  # an absurdly long id: keep the count readable, cut the rest
        return (head + summary)[: max(0, limit - len(tail) - 3)] + "..." + tail
    if len(summary) > room:
        summary = summary[: room - 3] + "..."
    return head + summary + tail
