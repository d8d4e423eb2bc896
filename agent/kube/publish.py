"""Publisher: the one entry point `run` (agent/daemon.py) and `check --apply` call.

    pub = Publisher(config, dry_run=args.dry_run)
    result = pub.publish(report)          # once per cycle; never raises for API trouble

Reads are cached (each PATCH answer is the whole Node, so a write refreshes the cache; a GET
happens only at start, after an error, and every `resync_interval`). Errors back off
exponentially with jitter; 403 is not hot-retried; 429 honours Retry-After; 409 re-reads
and re-applies once. On any error nothing is written, so an outage never flips a label or the
condition to healthy: the Node keeps its last state and its heartbeat goes stale.
"""

import logging
import random
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional

from agent import nfd
from agent.kube import reconcile
from agent.kube.errors import ApiError, Unreachable
from agent.kube.kubeconfig import KubeconfigError, load
from agent.kube.nodename import NODEADM_CONFIGS, resolve_node_name

if TYPE_CHECKING:
    from agent.kube.client import KubeClient

log = logging.getLogger(__name__)

BACKOFF_BASE_S = 5.0
BACKOFF_CAP_S = 300.0
FORBIDDEN_WAIT_S = 300.0  # a 403 will not fix itself in seconds: no hot retry


@dataclass
class PublishResult:
    node: Optional[str] = None
    node_source: str = ""
    dry_run: bool = False
    writes: List[str] = field(default_factory=list)
    plan: Optional[reconcile.Plan] = None
    error: Optional[str] = None
    waiting: Optional[str] = None  # why no attempt was made this cycle (backoff)
    nfd: Optional[str] = None

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


class Publisher:
    def __init__(
        self,
        config: Any,
        dry_run: bool = False,
        host: Any = None,
        clock: Callable[[], float] = time.time,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self.config = config
        self.kcfg = config.kube
        self.dry_run = dry_run
        self.clock = clock
        self.rng = rng
        if host is None:
            from agent.host import Host

            host = Host("/", description="this host", live=True)
        self.host = host
        self.opens = 0
        self.client: Optional[KubeClient] = None
        self.node_name: Optional[str] = None
        self.node_source = ""
        self._node: Optional[Dict[str, Any]] = None
        self._read_at = 0.0
        self._read_once = False
        self._failures = 0
        self._next_attempt = 0.0
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
        if self.client is not None:
            self.client.close()
            self.client = None

    def reconfigure(self, config: Any) -> None:
        """A reloaded config (SIGHUP): a new connection and node name when they may differ;
        the consecutive-open count carries over."""
        old = self.kcfg
        self.config, self.kcfg = config, config.kube
        keys = (
            "kubeconfig",
            "context",
            "node_name",
            "nodeadm_config_paths",
            "request_timeout",
            "exec_timeout",
        )
        if any(getattr(old, k) != getattr(self.kcfg, k) for k in keys):
            self.close()
            self.node_name, self.node_source = None, ""
            self._node, self._read_once = None, False
            self._failures, self._next_attempt = 0, 0.0

    # -- the cycle ------------------------------------------------------------------------
    def publish(self, report: Any) -> PublishResult:
        now = self.clock()
        self.opens = self.opens + 1 if report.gate.open else 0
        result = PublishResult(dry_run=self.dry_run)
        if self.config.nfd.enabled or nfd.read_labels(self.config.nfd.path) is not None:
            result.nfd = self._publish_nfd(report, now)
        if not self.kcfg.enabled:
            return result
        if now < self._next_attempt:
            result.node, result.node_source = self.node_name, self.node_source
            result.waiting = (
                f"backing off after an API error, next try in {self._next_attempt - now:.0f}s"
            )
            return result
        self.stats["attempts"] += 1
        try:
            self._ensure_client(result)
            self._cycle(report, now, result)
            self._failures = 0
            self.stats["last_success"] = now
        except ApiError as exc:
            result.error = self._describe(exc)
            self._fail(now, exc)
        except (Unreachable, KubeconfigError) as exc:
            result.error = str(exc)
            self._fail(now, None)
        if result.error:
            self.stats["errors"] += 1
            self.stats["last_error"] = result.error
            if self.log_errors:  # `check` prints it instead (stderr stays clean)
                log.warning("node verdict not published: %s", result.error)
        self.stats["writes"] += len(result.writes)
        result.node, result.node_source = self.node_name, self.node_source
        return result

    def _ensure_client(self, result: PublishResult) -> None:
        if self.node_name is None:
            paths = self.kcfg.nodeadm_config_paths or NODEADM_CONFIGS
            name, source = resolve_node_name(self.host, self.kcfg.node_name, nodeadm_paths=paths)
            if name is None:
                raise KubeconfigError(source)
            self.node_name, self.node_source = name, source
        if self.client is None:
            kc = load(self.kcfg.kubeconfig, self.kcfg.context, self.kcfg.exec_timeout)
            self.client = _client_class()(kc, timeout=self.kcfg.request_timeout)

    def _read(self, now: float, force: bool = False) -> Dict[str, Any]:
        assert self.client is not None and self.node_name is not None
        if force or self._node is None or now - self._read_at >= self.kcfg.resync_interval:
            self._remember(self.client.get_node(self.node_name), now)
            self._read_once = True
        assert self._node is not None
        return self._node

    def _remember(self, node: Dict[str, Any], now: float) -> None:
        self._node, self._read_at = node, now

    def _cycle(self, report: Any, now: float, result: PublishResult) -> None:
        for attempt in (1, 2):
            node = self._read(now, force=attempt == 2)
            plan = reconcile.plan(report, node, self.kcfg, self.opens, now)
            result.plan = plan
            if self.dry_run or not plan.writes:
                return
            try:
                self._apply(plan, now, result)
                return
            except ApiError as exc:
                if exc.status != 409 or attempt == 2:
                    raise
                log.info("409 conflict on node %s: re-reading and re-applying", self.node_name)

    def _apply(self, plan: reconcile.Plan, now: float, result: PublishResult) -> None:
        assert self.client is not None and self.node_name is not None
        if plan.node_patch:
            self._remember(self.client.patch_node(self.node_name, plan.node_patch), now)
            result.writes.append("node (labels/annotations/unschedulable)")
        if plan.status_patch:
            self._remember(self.client.patch_node_status(self.node_name, plan.status_patch), now)
            result.writes.append("node status (condition)")

    # -- errors ---------------------------------------------------------------------------
    def _describe(self, exc: ApiError) -> str:
        if exc.status in (403, 404) and not self._read_once:
            return (
                f"cannot read Node {self.node_name!r} (name from {self.node_source}): HTTP "
                f"{exc.status}: {exc.message}; the node name is probably wrong, set "
                "kube.node_name to the name `kubectl get nodes` shows"
            )
        return f"HTTP {exc.status}: {exc.message}"

    def _fail(self, now: float, exc: Optional[ApiError]) -> None:
        self._failures += 1
        self._node = None  # the Node may have changed meanwhile: re-read before writing
        delay = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** (self._failures - 1))
        delay *= 0.5 + 0.5 * self.rng()  # jitter, so a fleet does not retry in lockstep
        if exc is not None and exc.status == 403:
            delay = max(delay, FORBIDDEN_WAIT_S)
        if exc is not None and exc.status == 429 and exc.retry_after is not None:
            delay = max(delay, exc.retry_after)
        self._next_attempt = now + delay

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


def _expiry(path: str) -> Optional[float]:
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("# +expiry-time="):
                    return reconcile.parse_rfc3339(line.split("=", 1)[1])
    except OSError:
        return None
    return None


def check_verdict(config: Any, report: Any, host: Any, apply: bool = False) -> PublishResult:
    """What `gpu-node-agent check` shows (and, with --apply, writes) for this Report.

    On the live host this is one Publisher cycle (dry-run unless `apply`). On a bundle or a
    --host-root tree nothing is ever written: the plan is made against the Node captured in
    host.json (or an empty Node when none was captured).
    """
    if host.is_live:
        pub = Publisher(config, dry_run=not apply, host=host)
        pub.log_errors = False
        try:
            result = pub.publish(report)
        finally:
            pub.close()
        if result.plan is None:  # the Node could not be read: still show the desired state
            result.plan = reconcile.plan(report, {}, config.kube, pub.opens, time.time())
        return result
    node = host.fact("node")
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


def _client_class() -> "type[KubeClient]":
    from agent.kube.client import KubeClient  # imports requests: only when a request is made

    return KubeClient
