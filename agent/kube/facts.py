"""API-backed host facts: `node` (this host's Node object), `runtimeclasses` (the
RuntimeClassList) and `resourceslices` (this node's ResourceSlices), so checks stay pure and
read the API only through host.fact().

Shape (also what a bundle's host.json holds under the same keys):
  node:           the Node object as GET returns it, or {"error": "<why not>"}
  runtimeclasses: {"items": [RuntimeClass, ...]}, or {"error": "<why not>"}
  resourceslices: {"node": "<name>", "items": [ResourceSlice, ...]} (this node's, listed with
                  fieldSelector=spec.nodeName=<name>: all a node identity may list), or
                  {"error": "<why not>"}
None (absent) means not captured. An unreachable API (before `nodeadm init`, no
credentials, API down) is an `error`, on which the cluster checks skip with that reason.
Reads are cached for `ttl` seconds so `run` does not LIST RuntimeClasses every cycle.

The composition root (agent/cli_kube.py) keeps one KubeFacts per process and kube settings and
wraps each live Host it builds with it (`with_kube_facts`), so the cache and the session's
connection outlive the per-cycle Hosts of `run`.
"""

import threading
import time
from typing import Any, Callable, Dict, Optional, Tuple

from agent.hostview import FactOverlay
from agent.kube.errors import ApiError, Unreachable
from agent.kube.kubeconfig import KubeconfigError
from agent.kube.session import KubeSession

KUBE_FACTS = ("node", "runtimeclasses", "resourceslices")
DEFAULT_TTL_S = 600.0
# A check has its own deadline (Check.timeout_s); the API read must finish well within it.
FACT_TIMEOUT_S = 5.0


class KubeFacts:
    """The API facts over a KubeSession (agent/kube/session.py): the Node read is the
    session's, so the publisher of the same process plans against it without a second GET."""

    def __init__(
        self,
        config: Any,
        base: Any = None,
        ttl: float = DEFAULT_TTL_S,
        clock: Callable[[], float] = time.monotonic,
        session: Optional[KubeSession] = None,
    ) -> None:
        self.config = config
        self.base = base
        self.ttl = ttl
        self.clock = clock
        # No session handed in (tests): one that knows the name only from kube.node_name.
        self.session = session if session is not None else KubeSession(config.kube, None, clock)
        self._lock = threading.Lock()
        self._cache: Dict[str, Tuple[float, Any]] = {}

    def fact(self, name: str) -> Any:
        if name not in KUBE_FACTS:
            return self.base.fact(name) if self.base is not None else None
        if not self.config.kube.enabled:
            return {"error": "the Kubernetes API is not used (kube.enabled is false)"}
        if name == "node":  # cached by the session (shared with the publisher)
            try:
                return self.session.read_node(self.clock(), self.ttl, timeout=FACT_TIMEOUT_S)
            except (ApiError, Unreachable, KubeconfigError) as exc:
                return {"error": str(exc)}
        with self._lock:  # checks run in threads; one API read per fact per ttl
            hit = self._cache.get(name)
            if hit is not None and 0 <= self.clock() - hit[0] < self.ttl:
                return hit[1]
            value = self._resourceslices() if name == "resourceslices" else self._runtimeclasses()
            self._cache[name] = (self.clock(), value)
            return value

    def _runtimeclasses(self) -> Dict[str, Any]:
        try:
            answer = self.session.client().list_runtimeclasses(timeout=FACT_TIMEOUT_S)
            return {"items": list(answer.get("items") or [])}
        except (ApiError, Unreachable, KubeconfigError) as exc:
            return {"error": str(exc)}

    def _resourceslices(self) -> Dict[str, Any]:
        node, why = self.session.node_name()
        if node is None:
            return {"error": why}
        try:
            answer = self.session.client().list_resourceslices(node, timeout=FACT_TIMEOUT_S)
            return {"node": node, "items": list(answer.get("items") or [])}
        except (ApiError, Unreachable, KubeconfigError) as exc:
            return {"error": str(exc)}

    def close(self) -> None:
        self.session.close()


def with_kube_facts(host: Any, api: KubeFacts) -> Any:
    """``host`` with the API facts ``api`` (the process's KubeFacts over its one session,
    kept by agent/cli_kube.py) answering `node`, `runtimeclasses` and `resourceslices`."""
    return FactOverlay(host, KUBE_FACTS, api.fact)
