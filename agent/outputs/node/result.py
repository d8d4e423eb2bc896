"""What one publish cycle did: the writes attempted and their answers (the JSON
`publish.writes[]` of `check --apply`, docs/json-output.md) and the verdict shown by `check`
(agent/outputs/node/publish.py fills it in)."""

from typing import Any, Dict, List, Optional

from agent.outputs.node import reconcile
from agent.records import field, record
from agent.report import NodeFacts

WRITE_NODE = "node"  # labels, the owned annotations, spec.unschedulable (merge patch)
WRITE_STATUS = "status"  # the condition (strategic merge patch of nodes/<name>/status)
WRITE_EVENT = "event"
WHAT = {
    WRITE_NODE: "node (labels/annotations/unschedulable)",
    WRITE_STATUS: "node status (condition)",
}

@record
class WriteOutcome:
    """One write attempted (or held) and the server's answer: the JSON `publish.writes[]`."""

    write: str  # node | status | event
    ok: bool
    code: Optional[int] = None  # HTTP status; None = no answer (unreachable) or not sent
    reason: Optional[str] = None  # the Status reason (Forbidden, Invalid, ...) or the event's
    message: str = ""
    sent: bool = True  # False: held after an earlier refusal, not sent this time

    def as_dict(self) -> Dict[str, Any]:
        return {
            "write": self.write,
            "sent": self.sent,
            "ok": self.ok,
            "code": self.code,
            "reason": self.reason,
            "message": self.message,
        }


@record
class PublishResult:
    """What one publish attempt did to the Node: the plan, the writes and their outcomes."""

    node: Optional[str] = None
    node_source: str = ""
    dry_run: bool = False
    writes: List[str] = field(default_factory=list)
    plan: Optional[reconcile.Plan] = None
    error: Optional[str] = None
    waiting: Optional[str] = None  # why no (or no full) attempt was made this cycle
    nfd: Optional[str] = None
    outcomes: List[WriteOutcome] = field(default_factory=list)
    read: bool = False  # the Node was read this cycle (from the API or the session's read)
    seen: Optional[Dict[str, Any]] = None  # the Node as last read or written this cycle
    # The kubeconfig the session used and how it was chosen (agent/kube/kubeconfig_path.py).
    kubeconfig: Optional[str] = None
    kubeconfig_source: str = ""

    @property
    def fully_written(self) -> bool:
        """Everything the verdict needed is on the Node: it was read, and every write it
        needed (node and status; Events are not the verdict) was sent and accepted."""
        if self.dry_run or not self.read:
            return False
        return all(o.ok for o in self.outcomes if o.write in (WRITE_NODE, WRITE_STATUS))

    def lines(self) -> List[str]:
        out = [
            f"node: {self.node or '(unknown)'}"
            + (f" (from {self.node_source})" if self.node_source else "")
        ]
        if self.kubeconfig:
            out.append(f"kubeconfig: {self.kubeconfig} ({self.kubeconfig_source})")
        if self.plan is not None:
            shown = ", ".join(
                f"{k}={v}" if v is not None else f"{k} (absent)"
                for k, v in self.plan.labels.items()
            )
            c = self.plan.condition
            out.append(f"labels: {shown}")
            out.append(f"condition: {c['type']}={c['status']} reason={c['reason']}: {c['message']}")
            out += [f"note: {n}" for n in self.plan.notes]
            if not self.plan.writes:
                out.append("writes: none (the Node already matches)")
            elif self.dry_run:
                parts = (
                    ["node (labels/annotations/unschedulable)"] if self.plan.node_patch else []
                ) + (["node status (condition)"] if self.plan.status_patch else [])
                out.append("would write: " + ", ".join(parts) + " (not applied: use --apply)")
        if self.writes:
            out.append("wrote: " + ", ".join(self.writes))
        for o in self.outcomes:
            if not o.ok:
                verb = "held" if not o.sent else "refused" if o.code else "failed"
                code = f"HTTP {o.code} {o.reason or ''}".strip() if o.code else "no answer"
                out.append(f"not written ({verb}): {WHAT.get(o.write, o.write)}: {code}: "
                           f"{o.message}")
        if self.nfd:
            out.append(f"nfd: {self.nfd}")
        if self.waiting:
            out.append(f"waiting: {self.waiting}")
        if self.error:
            out.append(f"error: {self.error}")
        return out

    def as_dict(self) -> Dict[str, Any]:
        plan = self.plan
        return {
            "node": self.node,
            "node_source": self.node_source,
            "kubeconfig": self.kubeconfig,
            "kubeconfig_source": self.kubeconfig_source or None,
            "dry_run": self.dry_run,
            "labels": dict(plan.labels) if plan else None,
            "condition": dict(plan.condition) if plan else None,
            "notes": list(plan.notes) if plan else [],
            "would_write": bool(plan and plan.writes),
            "writes": list(self.writes),
            "nfd": self.nfd,
            "waiting": self.waiting,
            "error": self.error,
        }

    def publish_dict(self) -> Dict[str, Any]:
        """The JSON `publish` object of `check --apply` (docs/json-output.md)."""
        return {
            "node": self.node,
            "complete": self.fully_written,
            "writes": [o.as_dict() for o in self.outcomes],
            "waiting": self.waiting,
            "error": self.error,
        }


def cordoned_by_us(node: Any, prefix: str) -> bool:
    """The Node is cordoned (spec.unschedulable) and carries this agent's `<prefix>/cordoned`
    annotation, the pair agent/outputs/node/reconcile.py writes and removes together. A
    cordon someone else made is not ours. Any shape is tolerated (a Node from the API)."""
    node = node if isinstance(node, dict) else {}
    spec, meta = node.get("spec"), node.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    return (isinstance(spec, dict) and spec.get("unschedulable") is True
            and isinstance(annotations, dict) and f"{prefix}/cordoned" in annotations)


def facts_after(previous: Optional[NodeFacts], result: PublishResult, now: float,
                prefix: str) -> NodeFacts:
    """The metrics' view after an attempt: without a read the Node's state stays as last known
    and the attempt counts as failed; a refused or held write fails it too, while the cordon
    state is the Node as read (the write that would change it was not accepted)."""
    previous = previous or NodeFacts()  # None: the first attempt
    if result.seen is None:
        return NodeFacts(previous.cordoned, False, previous.last_success)
    ok = result.error is None and all(
        o.ok for o in result.outcomes if o.write in (WRITE_NODE, WRITE_STATUS))
    return NodeFacts(cordoned_by_us(result.seen, prefix), ok,
                     now if ok else previous.last_success)
