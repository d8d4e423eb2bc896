"""Desired state from the Report, actual state from the Node, and the patches between them.

Pure: no I/O, no clock (``now`` is an argument). The rules (docs/kubernetes.md "What is
written, and when"):

- allocation label: set once the gate has been open for N consecutive runs; kept on a later
  health failure (removing it makes the device-plugin/DRA DaemonSet leave the node while
  claims may still be prepared) unless configured, and even then never while the Report shows
  GPUs in use or cannot say (allocation-owner's ``details["in_use"]``);
- health label: the live verdict, "true" | "false";
- condition (default GPUReady): True = gate open; reason a CamelCase word as Kubernetes
  condition reasons are, and a message of at most 200 characters
  (agent/outputs/node/condition.py); lastTransitionTime only on a status change;
  lastHeartbeatTime refreshed at most every ``heartbeat_interval`` (the only write at steady
  state), timed on the monotonic clock while this process wrote the last one, so a wall-clock
  jump neither silences nor floods it;
- cordon (opt-in) on a fatal GPU fault, undone only when the agent's own annotation says it
  cordoned; taints are never written (NodeRestriction forbids them to a node identity); a
  fatal fault that only names GPUs does not cordon while the healthy GPUs are at least
  health.min_healthy_gpus (agent/gpu_health.py);
- annotation `<prefix>/unhealthy-gpus`: the unhealthy GPUs' UUIDs, sorted, comma-separated
  (a label value cannot hold a list), removed when every GPU is healthy;
- labels and conditions this agent owned (recorded in an annotation) but no longer manages
  are removed; nothing else on the Node is touched.
"""

import datetime
import json
from typing import Any, Dict, List, Mapping, Optional

from agent.outputs.node.condition import (
    desired_condition,
    fatal_faults,
    gpus_in_use,
    unhealthy_gpus_value,
)
from agent.records import field, record


def rfc3339(ts: float) -> str:
    return datetime.datetime.fromtimestamp(int(ts), datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )


@record
class Plan:
    """What the agent would write; empty patches mean nothing to do."""

    labels: Dict[str, Optional[str]]  # the managed labels as they should be (None = absent)
    condition: Dict[str, Any]
    node_patch: Dict[str, Any] = field(default_factory=dict)
    status_patch: Dict[str, Any] = field(default_factory=dict)
    notes: List[str] = field(default_factory=list)
    conditional: bool = False  # node_patch carries a resourceVersion precondition

    @property
    def writes(self) -> bool:
        return bool(self.node_patch or self.status_patch)


def _ann(cfg: Any, name: str) -> str:
    return f"{cfg.annotation_prefix}/{name}"


def _owned(annotations: Mapping[str, str], key: str) -> Dict[str, Any]:
    raw = annotations.get(key, "")
    try:
        value = json.loads(raw if isinstance(raw, str) and raw else "{}")
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def _parse_time(value: Any) -> Optional[float]:
    if not isinstance(value, str):
        return None
    # Here, not at the top: agent.kube.credentials brings ssl, which `check --bundle` (a plan
    # against the captured Node, no API) need not load.
    from agent.kube.credentials import parse_rfc3339

    try:
        return parse_rfc3339(value)
    except (OverflowError, OSError, ValueError):  # a year 1 or 9999 stamp from someone else
        return None


def _dict(value: Any) -> Dict[str, Any]:
    return value if isinstance(value, dict) else {}


def plan(
    report: Any,
    node: Mapping[str, Any],
    cfg: Any,
    consecutive_opens: int,
    now: float,
    since_beat: Optional[float] = None,
) -> Plan:
    """``now`` is wall time (the timestamps written); ``since_beat`` the monotonic seconds
    since this process last wrote the heartbeat (None: it has not), which decides when the
    next is due whatever the wall clock did."""
    # The Node comes from the API or from a bundle's host.json: tolerate any shape.
    meta = _dict(_dict(node).get("metadata"))
    labels: Mapping[str, str] = _dict(meta.get("labels"))
    annotations: Mapping[str, str] = _dict(meta.get("annotations"))
    raw_conditions = _dict(_dict(node).get("status")).get("conditions")
    conditions = (
        [c for c in raw_conditions if isinstance(c, dict)]
        if isinstance(raw_conditions, list)
        else []
    )
    node = {"spec": _dict(_dict(node).get("spec"))}
    in_use = gpus_in_use(report)
    notes: List[str] = []
    want: Dict[str, Optional[str]] = {}

    # -- allocation label -------------------------------------------------------------------
    akey, avalue = cfg.allocation_label, cfg.allocation_value or report.path
    current = labels.get(akey)
    if report.gate.open and consecutive_opens >= cfg.consecutive_opens:
        want[akey] = avalue
    elif report.gate.open:
        want[akey] = current
        if current != avalue:
            notes.append(
                f"{akey}={avalue} pending: gate open {consecutive_opens} of "
                f"{cfg.consecutive_opens} consecutive runs"
            )
    elif current is None:
        want[akey] = None
    elif not cfg.remove_allocation_label_on_failure:
        want[akey] = current
        notes.append(f"{akey} kept on a failure (remove_allocation_label_on_failure is false)")
    elif in_use is None or in_use > 0:
        want[akey] = current
        why = "GPU use unknown" if in_use is None else f"{in_use} allocation(s) still hold GPUs"
        notes.append(f"{akey} kept: {why}")
    else:
        want[akey] = None

    # -- health label -------------------------------------------------------------------------
    want[cfg.health_label] = "true" if report.gate.open else "false"

    # -- labels/conditions this agent owned but no longer manages ------------------------------
    owned_key = _ann(cfg, "managed")
    owned = _owned(annotations, owned_key)
    label_patch: Dict[str, Optional[str]] = {k: v for k, v in want.items() if labels.get(k) != v}
    old_alloc = owned.get("allocation")
    for old in (old_alloc, owned.get("health")):
        if isinstance(old, str) and old not in want and old in labels:
            if old == old_alloc and (in_use is None or in_use > 0):
                notes.append(f"{old} (no longer managed) kept: GPUs may be in use")
                continue
            label_patch[old] = None
    now_owned = {"allocation": akey, "health": cfg.health_label, "condition": cfg.condition_type}
    ann_patch: Dict[str, Optional[str]] = {}
    if owned != now_owned:
        ann_patch[owned_key] = json.dumps(now_owned, sort_keys=True, separators=(",", ":"))

    # -- the unhealthy GPUs, by UUID: a label value cannot hold a list ------------------------
    gpus_key = _ann(cfg, "unhealthy-gpus")
    listed = unhealthy_gpus_value(report)
    if annotations.get(gpus_key) != listed:
        ann_patch[gpus_key] = listed  # None: merge patch removes it

    # -- cordon (opt-in, below min_healthy_gpus only); undo only our own ---------------------
    node_patch: Dict[str, Any] = {}
    cordon_key = _ann(cfg, "cordoned")
    ours = cordon_key in annotations
    unschedulable = bool((node.get("spec") or {}).get("unschedulable"))
    fatal = fatal_faults(report, list(cfg.fatal_checks))
    conditional = False
    if fatal and cfg.cordon_on_fatal and not unschedulable:
        node_patch["spec"] = {"unschedulable": True}
        ann_patch[cordon_key] = ",".join(fatal)
        conditional = True
    elif ours and not fatal:
        if unschedulable:
            node_patch["spec"] = {"unschedulable": None}
        ann_patch[cordon_key] = None
        conditional = True
    elif fatal and cfg.cordon_on_fatal and unschedulable and not ours:
        notes.append("node already cordoned by someone else: left as it is")

    if label_patch or ann_patch:
        node_patch["metadata"] = {}
        if label_patch:
            node_patch["metadata"]["labels"] = label_patch
        if ann_patch:
            node_patch["metadata"]["annotations"] = ann_patch
    if conditional and node_patch:
        # A cordon decision rests on what was read: make the write conditional (409 = re-read).
        node_patch.setdefault("metadata", {})["resourceVersion"] = meta.get("resourceVersion")

    # -- condition ----------------------------------------------------------------------------
    cond: Dict[str, Any] = dict(desired_condition(report, cfg.condition_type))
    actual = next((c for c in conditions if c.get("type") == cfg.condition_type), None)
    stamp = rfc3339(now)
    transition = actual is None or actual.get("status") != cond["status"]
    kept = actual.get("lastTransitionTime", stamp) if actual is not None else stamp
    cond["lastTransitionTime"] = stamp if transition else kept
    changed = actual is None or any(
        actual.get(k) != cond[k] for k in ("status", "reason", "message")
    )
    if since_beat is not None:
        due = since_beat >= cfg.heartbeat_interval
    else:
        beat = _parse_time(actual.get("lastHeartbeatTime")) if actual else None
        # a heartbeat "from the future" (a wall clock that jumped back) is due now
        due = beat is None or not 0 <= now - beat < cfg.heartbeat_interval
    status_conditions: List[Dict[str, Any]] = []
    if changed or due:
        cond["lastHeartbeatTime"] = stamp
        status_conditions.append(dict(cond))
    else:
        cond["lastHeartbeatTime"] = actual.get("lastHeartbeatTime") if actual else stamp
    old_type = owned.get("condition")
    if (
        isinstance(old_type, str)
        and old_type != cfg.condition_type
        and any(c.get("type") == old_type for c in conditions)
    ):
        # strategic merge patch's delete directive for a list merged by key
        status_conditions.append({"type": old_type, "$patch": "delete"})
    status_patch = {"status": {"conditions": status_conditions}} if status_conditions else {}
    return Plan(
        labels=want,
        condition=cond,
        node_patch=node_patch,
        status_patch=status_patch,
        notes=notes,
        conditional=conditional,
    )
