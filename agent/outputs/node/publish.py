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
Transient errors (unreachable, 5xx, 429, a 2xx that is not a Node) wait a random time up
to two heartbeat intervals (full jitter; a GPU event's Report tries once sooner); Retry-After
is honoured up to the heartbeat interval; 409 re-reads and re-applies once. Intervals run on
the monotonic clock. A verdict transition is also an Event (events.py); a failed read is
explained in one line (hints.py); the NFD file is written beside (nfdfile.py); what a cycle
did: result.py.
"""

import logging
import random
import time
from typing import Any, Callable, Dict, Optional

from agent.kube.errors import ApiError, Unreachable, sanitize
from agent.kube.kubeconfig import KubeconfigError
from agent.kube.session import KubeSession, settings_key
from agent.outputs import nfd
from agent.outputs.node import reconcile
from agent.outputs.node.events import NodeEvents
from agent.outputs.node.hints import NotRegistered, describe_read
from agent.outputs.node.nfdfile import publish_nfd
from agent.outputs.node.result import (
    WHAT,
    WRITE_EVENT,
    WRITE_NODE,
    WRITE_STATUS,
    PublishResult,
    WriteOutcome,
    facts_after,
)
from agent.report import NodeFacts, count_opens

log = logging.getLogger(__name__)

BACKOFF_CAP_S = 300.0
FORBIDDEN_WAIT_S = 300.0  # a refusal will not fix itself in seconds: no hot retry
_REFUSALS = (400, 401, 403, 404, 405, 415, 422)


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
        self.clock = clock  # wall: the timestamps written; intervals run on the monotonic one
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
        self._events = NodeEvents(self.monotonic())
        self.facts: Optional[NodeFacts] = None  # the last attempt, for the metrics (daemon)
        # For metrics and logs (the daemon reads them; nothing here exports them).
        self.log_errors = True
        self.stats: Dict[str, Any] = {"attempts": 0, "errors": 0, "writes": 0,
                                      "last_success": None, "last_error": None}
        self._early_used = False  # a GPU event's one try inside a backoff (_early_try)

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
        self.opens = count_opens(self.opens, report)  # scheduled runs only
        result = PublishResult(dry_run=self.dry_run)
        if self.config.nfd.enabled or nfd.read_labels(self.config.nfd.path) is not None:
            result.nfd = publish_nfd(self.config, report, self.opens, now, self.dry_run)
        if not self.kcfg.enabled:
            return result
        if mono < self._next_attempt and not self._early_try(report):
            result.node, result.node_source = self.node_name, self.node_source
            result.waiting = (
                f"backing off after an API error, next try in {self._next_attempt - mono:.0f}s"
            )
            return result
        self.stats["attempts"] += 1
        try:
            self._resolve_name()
            self._cycle(report, now, mono, result)
            if not result.error:  # a success (an early one too) ends the backoff
                self._failures, self._early_used, self._next_attempt = 0, False, 0.0
                self.stats["last_success"] = now
        except ApiError as exc:  # the read
            try:
                result.error = describe_read(exc, self.node_name, self.node_source, self.session)
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
        self.facts = facts_after(self.facts, result, now, self.kcfg.annotation_prefix)
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
        result.read, result.seen = True, node
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
        self._events.record(self.session, self.node_name, self.kcfg, before, plan, result, now,
                            mono)
        refused = [o for o in result.outcomes if not o.ok and o.write != WRITE_EVENT]
        if refused:
            result.error = "; ".join(
                f"{WHAT[o.write]} not written"
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
                    node = result.seen = self.session.read_node(mono, 0.0)
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
            result.seen = answer
            self._held.pop(WRITE_NODE, None)
            result.writes.append(WHAT[WRITE_NODE])
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
        result.writes.append(WHAT[WRITE_STATUS])
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

    # -- errors ---------------------------------------------------------------------------
    def _early_try(self, report: Any) -> bool:
        """A GPU event's Report (agent/daemon/triggers.py) tries once inside a backoff window:
        a fault is one node's, never the fleet's at once, so it cannot herd; once per run of
        failures, so an XID storm during an outage is no hot retry."""
        early = getattr(report, "trigger", "schedule") == "event" and not self._early_used
        self._early_used = self._early_used or early
        return early

    def _fail(self, mono: float, exc: Optional[ApiError]) -> None:
        self._failures += 1
        self._stale = True  # the Node may have changed meanwhile: re-read before writing
        # Full jitter (AWS Architecture Blog, "Exponential Backoff And Jitter") over two
        # heartbeat intervals from the first failure: on average one try per heartbeat, the
        # rate a healthy agent writes at, so a fleet retrying through an outage, and catching up
        # after it, stays near its steady load (docs/kubernetes.md "API load of a fleet").
        delay = 2 * min(BACKOFF_CAP_S, self.kcfg.heartbeat_interval) * self.rng()
        if exc is not None and exc.status == 403:
            delay = max(delay, FORBIDDEN_WAIT_S)
        if exc is not None and exc.retry_after is not None:
            # An absurd Retry-After (1e12) must not silence the publisher: at most one
            # heartbeat interval, after which the Node's heartbeat is stale anyway.
            delay = max(delay, min(exc.retry_after, self.kcfg.heartbeat_interval))
        self._next_attempt = mono + min(delay, retry_ceiling(self.kcfg.heartbeat_interval))


def retry_ceiling(heartbeat_interval: float) -> float:
    """The longest wait after an error: the jitter window, a 403's hold or a Retry-After."""
    return max(2 * min(BACKOFF_CAP_S, heartbeat_interval), BACKOFF_CAP_S, heartbeat_interval)

