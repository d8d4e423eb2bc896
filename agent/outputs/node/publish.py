"""Publisher: the one entry point `run` (agent/daemon/service.py) and `check --apply` call.

    pub = Publisher(config, dry_run=args.dry_run, session=session)
    result = pub.publish(report)          # once per cycle; never raises for API trouble

The Node is read through the process's KubeSession (agent/kube/session.py), which the command
line builds with the Node identity it resolved (agent/cli_kube.py) and hands both to this
publisher and to the host facts: one client, one exec-plugin run per credential lifetime, and
in `check --apply` one GET. Nothing here builds or reads a Host. Each PATCH answer is the
whole Node and refreshes that read; a GET happens at start, after an error and every
`resync_interval`.

The verdict is two writes that never wait on each other: the Node object (labels, the owned
annotations, a cordon) and its status (the condition). A refusal of one (403, 422, ...) is
reported with the server's reason, held for FORBIDDEN_WAIT_S, and the other is still written.
A failed read writes nothing, so an outage never flips a label or the condition to healthy.
Transient errors (unreachable, 5xx, 429, a 2xx that is not a Node) back off exponentially
with jitter; Retry-After is honoured up to the heartbeat interval; 409 re-reads and re-applies
once. Intervals, backoff and rate limits run on the monotonic clock; the wall clock is read
only for the timestamps written to the Node.

Events (core/v1, namespace `default`, involvedObject the Node, as the kubelet's and
node-problem-detector's recorders write them: client-go tools/record event.go makeEvent puts
events of cluster-scoped objects in `default`) mark each verdict transition: gate open and
closed, cordon, uncordon. They are rate-limited like client-go's EventSourceObjectSpamFilter
(tools/record/events_cache.go: a burst of 25, then one per 5 minutes), and a refused Event is
reported and never blocks the rest.
"""

import logging
import os
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

from agent.kube.credentials import CredentialError
from agent.kube.errors import ApiError, Unreachable, sanitize
from agent.kube.kubeconfig import KubeconfigError
from agent.kube.session import KubeSession, node_identity_name, settings_key
from agent.outputs import nfd
from agent.outputs.node import reconcile
from agent.outputs.ratelimit import TokenBucket

log = logging.getLogger(__name__)

BACKOFF_BASE_S = 5.0
BACKOFF_CAP_S = 300.0
FORBIDDEN_WAIT_S = 300.0  # a refusal will not fix itself in seconds: no hot retry
# client-go tools/record/events_cache.go: defaultSpamBurst 25, defaultSpamQPS 1/300.
EVENT_BURST = 25
EVENT_REFILL_S = 300.0
EVENT_NAMESPACE = "default"
COMPONENT = "gpu-node-agent"

WRITE_NODE = "node"  # labels, the owned annotations, spec.unschedulable (merge patch)
WRITE_STATUS = "status"  # the condition (strategic merge patch of nodes/<name>/status)
WRITE_EVENT = "event"
_WHAT = {
    WRITE_NODE: "node (labels/annotations/unschedulable)",
    WRITE_STATUS: "node status (condition)",
}
_REFUSALS = (400, 401, 403, 404, 405, 415, 422)


class NotRegistered(Exception):
    """The Node does not exist yet and the credentials are this node's own: the kubelet has
    not registered it (before `nodeadm init` / `kubeadm join`). Not an error."""


@dataclass
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


@dataclass
class PublishResult:
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
                out.append(f"not written ({verb}): {_WHAT.get(o.write, o.write)}: {code}: "
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


class Publisher:
    def __init__(
        self,
        config: Any,
        dry_run: bool = False,
        clock: Callable[[], float] = time.time,
        rng: Callable[[], float] = random.random,
        monotonic: Optional[Callable[[], float]] = None,
        session: Optional[KubeSession] = None,
    ) -> None:
        self.config = config
        self.kcfg = config.kube
        self.dry_run = dry_run
        self.clock = clock  # wall: the timestamps written
        # Intervals run on the monotonic clock; a test that drives `clock` drives both.
        self.monotonic = monotonic or (time.monotonic if clock is time.time else clock)
        self.rng = rng
        # The command line hands in the process's session; without one (tests, the
        # benchmark) the name comes from kube.node_name alone.
        self.session = session if session is not None else KubeSession(config.kube)
        self.opens = 0
        self.node_name: Optional[str] = None
        self.node_source = ""
        self._failures = 0
        self._next_attempt = 0.0
        # Re-read before the next plan (after an error). At start the session's read is used
        # when younger than resync_interval: in `check` it is the one the checks just made.
        self._stale = False
        self._held: Dict[str, float] = {}  # write -> monotonic time it may be sent again
        self._beat_at: Optional[float] = None  # monotonic time of our last heartbeat write
        self._events = TokenBucket(EVENT_BURST, EVENT_REFILL_S, self.monotonic())
        # For metrics and logs (the daemon reads them; nothing here exports them).
        self.log_errors = True
        self.stats: Dict[str, Any] = {
            "attempts": 0,
            "errors": 0,
            "writes": 0,
            "last_success": None,
            "last_error": None,
        }

    def close(self) -> None:
        self.session.close()

    def reconfigure(self, config: Any, session: Optional[KubeSession] = None) -> None:
        """A reloaded config (SIGHUP): a new session (the command line's, for the new
        settings) when the connection or node name may differ; the consecutive-open count
        carries over."""
        old = self.kcfg
        self.config, self.kcfg = config, config.kube
        if settings_key(old) != settings_key(self.kcfg):
            self.session.close()
            self.session = session if session is not None else KubeSession(config.kube)
            self.node_name, self.node_source = None, ""
            self._stale, self._held, self._beat_at = False, {}, None
            self._failures, self._next_attempt = 0, 0.0

    # -- the cycle ------------------------------------------------------------------------
    def publish(self, report: Any) -> PublishResult:
        now = self.clock()
        mono = self.monotonic()
        self.opens = self.opens + 1 if report.gate.open else 0
        result = PublishResult(dry_run=self.dry_run)
        if self.config.nfd.enabled or nfd.read_labels(self.config.nfd.path) is not None:
            result.nfd = self._publish_nfd(report, now)
        if not self.kcfg.enabled:
            return result
        if mono < self._next_attempt:
            result.node, result.node_source = self.node_name, self.node_source
            result.waiting = (
                f"backing off after an API error, next try in {self._next_attempt - mono:.0f}s"
            )
            return result
        self.stats["attempts"] += 1
        try:
            self._resolve_name()
            self._cycle(report, now, mono, result)
            if not result.error:
                self._failures = 0
                self.stats["last_success"] = now
        except ApiError as exc:  # the read
            try:
                result.error = self._describe_read(exc)
                self._fail(mono, exc)
            except NotRegistered as waiting:
                result.waiting = str(waiting)
                self._stale = True
                self._next_attempt = mono + min(BACKOFF_CAP_S, self.kcfg.heartbeat_interval)
        except (Unreachable, KubeconfigError) as exc:
            result.error = sanitize(exc, 400)
            self._fail(mono, None)
        if result.error:
            self.stats["errors"] += 1
            self.stats["last_error"] = result.error
            if self.log_errors:  # `check` prints it instead (stderr stays clean)
                log.warning("node verdict not (fully) published: %s", result.error)
        self.stats["writes"] += len(result.writes)
        result.node, result.node_source = self.node_name, self.node_source
        return result

    def _resolve_name(self) -> None:
        name, source = self.session.node_name()
        if name is None:
            raise KubeconfigError(source)
        self.node_name, self.node_source = name, source

    def _read(self, mono: float) -> Dict[str, Any]:
        max_age = 0.0 if self._stale else self.kcfg.resync_interval
        node = self.session.read_node(mono, max_age)
        self._stale = False
        return node

    def _cycle(self, report: Any, now: float, mono: float, result: PublishResult) -> None:
        node = self._read(mono)
        result.read = True
        since_beat = None if self._beat_at is None else mono - self._beat_at
        plan = reconcile.plan(report, node, self.kcfg, self.opens, now, since_beat)
        result.plan = plan
        if self.dry_run or not plan.writes:
            return
        before = node
        if plan.node_patch:
            plan = self._write_node(report, plan, now, mono, result, since_beat)
            result.plan = plan
        if plan.status_patch:
            self._write_status(plan, mono, result)
        self._transition_events(before, plan, result, now, mono)
        refused = [o for o in result.outcomes if not o.ok and o.write != WRITE_EVENT]
        if refused:
            result.error = "; ".join(
                f"{_WHAT[o.write]} not written"
                + (f" (held, refused earlier): {o.message}" if not o.sent else
                   f": HTTP {o.code} {o.reason or ''}: {o.message}" if o.code else
                   f": {o.message}")
                for o in refused
            )
            if all(not o.sent for o in refused):
                result.waiting, result.error = result.error, None

    def _held_outcome(self, write: str, mono: float) -> Optional[WriteOutcome]:
        until = self._held.get(write)
        if until is None or mono >= until:
            return None
        return WriteOutcome(write, ok=False, sent=False,
                            message=f"next try in {until - mono:.0f}s")

    def _write_node(
        self, report: Any, plan: reconcile.Plan, now: float, mono: float,
        result: PublishResult, since_beat: Optional[float],
    ) -> reconcile.Plan:
        assert self.node_name is not None
        held = self._held_outcome(WRITE_NODE, mono)
        if held is not None:
            result.outcomes.append(held)
            return plan
        for attempt in (1, 2):
            try:
                answer = self.session.client().patch_node(self.node_name, plan.node_patch)
            except ApiError as exc:
                if exc.status == 409 and attempt == 1:
                    log.info("409 conflict on node %s: re-reading and re-applying",
                             self.node_name)
                    node = self.session.read_node(mono, 0.0)
                    plan = reconcile.plan(report, node, self.kcfg, self.opens, now, since_beat)
                    if not plan.node_patch:
                        return plan
                    continue
                self._refused(WRITE_NODE, exc, mono, result)
                return plan
            except Unreachable as exc:
                self._unreachable(WRITE_NODE, exc, mono, result)
                return plan
            self.session.remember(answer, mono)
            self._held.pop(WRITE_NODE, None)
            result.writes.append(_WHAT[WRITE_NODE])
            result.outcomes.append(WriteOutcome(WRITE_NODE, ok=True, code=200))
            return plan
        return plan  # pragma: no cover

    def _write_status(self, plan: reconcile.Plan, mono: float, result: PublishResult) -> None:
        assert self.node_name is not None
        held = self._held_outcome(WRITE_STATUS, mono)
        if held is not None:
            result.outcomes.append(held)
            return
        try:
            answer = self.session.client().patch_node_status(self.node_name, plan.status_patch)
        except ApiError as exc:
            self._refused(WRITE_STATUS, exc, mono, result)
            return
        except Unreachable as exc:
            self._unreachable(WRITE_STATUS, exc, mono, result)
            return
        self.session.remember(answer, mono)
        self._held.pop(WRITE_STATUS, None)
        self._beat_at = mono
        result.writes.append(_WHAT[WRITE_STATUS])
        result.outcomes.append(WriteOutcome(WRITE_STATUS, ok=True, code=200))

    def _refused(self, write: str, exc: ApiError, mono: float, result: PublishResult) -> None:
        result.outcomes.append(
            WriteOutcome(write, ok=False, code=exc.status, reason=exc.reason,
                         message=exc.message)
        )
        if exc.status in _REFUSALS:
            # The same request will be refused again: hold this write, keep the other going.
            self._held[write] = mono + FORBIDDEN_WAIT_S
        else:  # 409 twice, 429, 5xx: transient, back off everything
            self._fail(mono, exc)

    def _unreachable(
        self, write: str, exc: Unreachable, mono: float, result: PublishResult
    ) -> None:
        result.outcomes.append(WriteOutcome(write, ok=False, message=sanitize(exc)))
        self._fail(mono, None)

    # -- events ---------------------------------------------------------------------------
    def _transition_events(
        self, before: Dict[str, Any], plan: reconcile.Plan, result: PublishResult,
        now: float, mono: float,
    ) -> None:
        ok = {o.write for o in result.outcomes if o.ok}
        events = []
        if WRITE_STATUS in ok:
            old = _condition_status(before, self.kcfg.condition_type)
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
            why = ann.get(f"{self.kcfg.annotation_prefix}/cordoned") or ""
            if spec["unschedulable"]:
                events.append(("Warning", "GPUFaultCordon", f"cordoned: fatal GPU fault ({why})"))
            else:
                events.append(("Normal", "GPUFaultUncordon",
                               "uncordoned: the fatal GPU fault that cordoned it is gone"))
        for etype, reason, message in events:
            self._send_event(before, etype, reason, message, result, now, mono)

    def _send_event(
        self, node: Dict[str, Any], etype: str, reason: str, message: str,
        result: PublishResult, now: float, mono: float,
    ) -> None:
        assert self.node_name is not None
        if not self._events.take(mono):
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
            "metadata": {"name": f"{self.node_name}.{int(now * 1e9):x}",
                         "namespace": EVENT_NAMESPACE},
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": self.node_name,
                               "uid": str(meta.get("uid") or self.node_name)},
            "reason": reason,
            "message": message[: reconcile.MESSAGE_LIMIT],
            "type": etype,
            "source": {"component": COMPONENT, "host": self.node_name},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.node_name,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            self.session.client().create_event(EVENT_NAMESPACE, event)
        except ApiError as exc:
            result.outcomes.append(WriteOutcome(WRITE_EVENT, ok=False, code=exc.status,
                                                reason=reason, message=exc.message))
            return
        except (Unreachable, KubeconfigError) as exc:
            result.outcomes.append(WriteOutcome(WRITE_EVENT, ok=False, reason=reason,
                                                message=sanitize(exc)))
            return
        result.outcomes.append(WriteOutcome(WRITE_EVENT, ok=True, code=201, reason=reason))

    # -- errors ---------------------------------------------------------------------------
    def _describe_read(self, exc: ApiError) -> str:
        """One line with the cause, for a GET of the Node that did not answer it."""
        name, source = self.node_name, self.node_source
        base = f"cannot read Node {name!r} (name from {source}): HTTP {exc.status}: {exc.message}"
        if exc.status == 401:
            return (f"{base}; the server rejected the credentials: "
                    f"{self._credential_source()} (expired, revoked or from another cluster)")
        if exc.status == 403 and "system:anonymous" in exc.message:
            return (f"{base}; the server saw no credentials (system:anonymous): the kubeconfig's "
                    f"{self._credential_source()} did not reach it")
        if exc.status not in (403, 404):
            return base
        user, how = self.session.identity()
        ident = node_identity_name(user)
        if exc.status == 404 and ident is not None and ident == name:
            raise NotRegistered(
                f"Node {name!r} is not registered yet (the credentials are {user}, from {how}): "
                "the kubelet registers it when it joins; nothing to write until then"
            )
        if ident is not None and ident != name:
            return (f"{base}; the name is wrong: the credentials are {user} (from {how}), which "
                    f"may only read Node {ident!r}: set kube.node_name: {ident}")
        if user is not None and ident is None:
            return (f"{base}; the credentials are {user} (from {how}), not a node identity "
                    "(system:node:<name>): use the kubelet's kubeconfig")
        return f"{base}; the credentials' identity is {how}"

    def _credential_source(self) -> str:
        try:
            kc = self.session.client().kubeconfig
        except (KubeconfigError, Unreachable):
            return "credentials"
        if kc.exec_spec is not None:
            return f"exec plugin {os.path.basename(kc.exec_spec.command)}"
        try:
            creds = kc.credentials()
        except CredentialError:  # a hint; the request itself already failed
            return "credentials"
        cert = getattr(creds, "cert_file", None)
        if cert and not creds.token:
            return f"client certificate {cert}"
        return "bearer token"

    def _fail(self, mono: float, exc: Optional[ApiError]) -> None:
        self._failures += 1
        self._stale = True  # the Node may have changed meanwhile: re-read before writing
        delay = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** min(self._failures - 1, 16))
        delay *= 0.5 + 0.5 * self.rng()  # jitter, so a fleet does not retry in lockstep
        if exc is not None and exc.status == 403:
            delay = max(delay, FORBIDDEN_WAIT_S)
        if exc is not None and exc.retry_after is not None:
            # An absurd Retry-After (1e12) must not silence the publisher: at most one
            # heartbeat interval, after which the Node's heartbeat is stale anyway.
            delay = max(delay, min(exc.retry_after, self.kcfg.heartbeat_interval))
        self._next_attempt = mono + min(delay, max(BACKOFF_CAP_S, self.kcfg.heartbeat_interval))

    # -- NFD ------------------------------------------------------------------------------
    def _publish_nfd(self, report: Any, now: float) -> str:
        path = self.config.nfd.path
        current = nfd.read_labels(path)
        if not self.config.nfd.enabled:
            if self.dry_run:
                return f"would remove {path} (nfd output turned off)"
            nfd.remove(path)
            return f"removed {path} (nfd output turned off)"
        fake = {"metadata": {"labels": current or {}}}
        plan = reconcile.plan(report, fake, self.kcfg, self.opens, now)
        wanted = {k: v for k, v in plan.labels.items() if v is not None}
        expires = _expiry(path)
        fresh = expires is not None and expires - now > self.config.nfd.expiry / 2
        if current == wanted and fresh:
            return f"{path} up to date"
        if self.dry_run:
            return f"would write {path}"
        try:
            nfd.write(path, wanted, now + self.config.nfd.expiry)
        except OSError as exc:
            return f"cannot write {path}: {exc.strerror or exc}"
        return f"wrote {path}"


def _condition_status(node: Any, ctype: str) -> Optional[str]:
    status = node.get("status") if isinstance(node, dict) else None
    conditions = status.get("conditions") if isinstance(status, dict) else None
    for c in conditions if isinstance(conditions, list) else []:
        if isinstance(c, dict) and c.get("type") == ctype:
            value = c.get("status")
            return value if isinstance(value, str) else None
    return None


def _expiry(path: str) -> Optional[float]:
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("# +expiry-time="):
                    return reconcile.parse_rfc3339(line.split("=", 1)[1])
    except OSError:
        return None
    return None


def check_verdict(
    config: Any, report: Any, session: Optional[KubeSession] = None,
    node: Any = None, apply: bool = False,
) -> PublishResult:
    """What `gpu-node-agent check` shows (and, with --apply, writes) for this Report.

    On the live host (``session`` given) this is one Publisher cycle (dry-run unless `apply`)
    on the session the checks' host facts used, so the Node the checks read is the one planned
    against. On a bundle or a --host-root tree (no session) nothing is ever written: the plan
    is made against ``node``, the Node captured in host.json (or an empty Node when none was
    captured); the command line reads it from its Host.
    """
    if session is not None:
        pub = Publisher(config, dry_run=not apply, session=session)
        pub.log_errors = False
        try:
            result = pub.publish(report)
        finally:
            pub.close()
        if result.plan is None:  # the Node could not be read: still show the desired state
            result.plan = reconcile.plan(report, {}, config.kube, pub.opens, time.time())
        return result
    captured = isinstance(node, dict) and isinstance(node.get("metadata"), dict)
    result = PublishResult(dry_run=True)
    if captured:
        result.node = str(node["metadata"].get("name") or "") or None
        result.node_source = "the Node captured in the bundle"
    else:
        result.node_source = "no Node captured: compared with an empty Node"
    opens = 1 if report.gate.open else 0
    result.plan = reconcile.plan(report, node if captured else {}, config.kube, opens, time.time())
    return result
