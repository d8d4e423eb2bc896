"""Node Events for the verdict's transitions: gate open and closed, cordon, uncordon.

core/v1 Events in namespace `default`, involvedObject the Node, as the kubelet's and
node-problem-detector's recorders write them (client-go tools/record event.go makeEvent puts
events of cluster-scoped objects in `default`). They are rate-limited like client-go's
EventSourceObjectSpamFilter (tools/record/events_cache.go: a burst of 25, then one per 5
minutes), and a refused Event is reported and never blocks the rest.
"""

from typing import Any, Dict, Optional

from agent.kube.errors import ApiError, Unreachable, sanitize
from agent.kube.kubeconfig import KubeconfigError
from agent.kube.session import KubeSession
from agent.outputs.node import reconcile
from agent.outputs.node.condition import MESSAGE_LIMIT
from agent.outputs.node.result import (
    WRITE_EVENT,
    WRITE_NODE,
    WRITE_STATUS,
    PublishResult,
    WriteOutcome,
)
from agent.outputs.ratelimit import TokenBucket

# client-go tools/record/events_cache.go: defaultSpamBurst 25, defaultSpamQPS 1/300.
EVENT_BURST = 25
EVENT_REFILL_S = 300.0
EVENT_NAMESPACE = "default"
COMPONENT = "gpu-node-agent"


class NodeEvents:
    """The Events one publisher sends, behind its own rate limit."""

    def __init__(self, mono: float) -> None:
        self.bucket = TokenBucket(EVENT_BURST, EVENT_REFILL_S, mono)

    def record(
        self, session: KubeSession, node_name: Optional[str], kcfg: Any,
        before: Dict[str, Any], plan: reconcile.Plan, result: PublishResult,
        now: float, mono: float,
    ) -> None:
        """The Events of this cycle's transitions, for the writes that were accepted."""
        ok = {o.write for o in result.outcomes if o.ok}
        events = []
        if WRITE_STATUS in ok:
            old = condition_status(before, kcfg.condition_type)
            new = plan.condition["status"]
            if old is not None and old != new:
                if new == "True":
                    events.append(("Normal", "GPUGateOpen", plan.condition["message"]))
                else:
                    events.append(("Warning", "GPUGateClosed",
                                   f"{plan.condition['reason']}: {plan.condition['message']}"))
        spec = plan.node_patch.get("spec") if WRITE_NODE in ok else None
        if isinstance(spec, dict) and "unschedulable" in spec:
            ann = (plan.node_patch.get("metadata") or {}).get("annotations") or {}
            why = ann.get(f"{kcfg.annotation_prefix}/cordoned") or ""
            if spec["unschedulable"]:
                events.append(("Warning", "GPUFaultCordon", f"cordoned: fatal GPU fault ({why})"))
            else:
                events.append(("Normal", "GPUFaultUncordon",
                               "uncordoned: the fatal GPU fault that cordoned it is gone"))
        for etype, reason, message in events:
            self._send(session, node_name, before, etype, reason, message, result, now, mono)

    def _send(
        self, session: KubeSession, node_name: Optional[str], node: Dict[str, Any],
        etype: str, reason: str, message: str, result: PublishResult, now: float, mono: float,
    ) -> None:
        assert node_name is not None
        if not self.bucket.take(mono):
            result.outcomes.append(WriteOutcome(WRITE_EVENT, ok=False, sent=False, reason=reason,
                                                message="rate-limited (25, then 1 per 300s)"))
            return
        stamp = reconcile.rfc3339(now)
        raw_meta = node.get("metadata") if isinstance(node, dict) else None
        meta: Dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            # the kubelet's recorder names events `<object>.<unix nanoseconds, hex>`
            "metadata": {"name": f"{node_name}.{int(now * 1e9):x}",
                         "namespace": EVENT_NAMESPACE},
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node_name,
                               "uid": str(meta.get("uid") or node_name)},
            "reason": reason,
            "message": message[:MESSAGE_LIMIT],
            "type": etype,
            "source": {"component": COMPONENT, "host": node_name},
            "reportingComponent": COMPONENT,
            "reportingInstance": node_name,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            session.client().create_event(EVENT_NAMESPACE, event)
        except ApiError as exc:
            result.outcomes.append(WriteOutcome(WRITE_EVENT, ok=False, code=exc.status,
                                                reason=reason, message=exc.message))
            return
        except (Unreachable, KubeconfigError) as exc:
            result.outcomes.append(WriteOutcome(WRITE_EVENT, ok=False, reason=reason,
                                                message=sanitize(exc)))
            return
        result.outcomes.append(WriteOutcome(WRITE_EVENT, ok=True, code=201, reason=reason))


def condition_status(node: Any, ctype: str) -> Optional[str]:
    status = node.get("status") if isinstance(node, dict) else None
    conditions = status.get("conditions") if isinstance(status, dict) else None
    for c in conditions if isinstance(conditions, list) else []:
        if isinstance(c, dict) and c.get("type") == ctype:
            value = c.get("status")
            return value if isinstance(value, str) else None
    return None
