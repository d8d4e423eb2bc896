"""API-backed host facts: `node` (this host's Node object) and `runtimeclasses` (the
RuntimeClassList), so checks stay pure and read the API only through host.fact().

Shape (also what a bundle's host.json holds under the same keys):
  node:           the Node object as GET returns it, or {"error": "<why not>"}
  runtimeclasses: {"items": [RuntimeClass, ...]}, or {"error": "<why not>"}
None (absent) means not captured. An unreachable API (before `nodeadm init`, no
credentials, API down) is an `error`, on which the cluster checks skip with that reason.
Reads are cached for `ttl` seconds so `run` does not LIST RuntimeClasses every cycle.
"""

import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Tuple

from agent.kube.errors import ApiError, Unreachable
from agent.kube.kubeconfig import KubeconfigError, load
from agent.kube.nodename import NODEADM_CONFIGS, resolve_node_name

KUBE_FACTS = ("node", "runtimeclasses")
DEFAULT_TTL_S = 600.0
# A check has its own deadline (Check.timeout_s); the API read must finish well within it.
FACT_TIMEOUT_S = 5.0

if TYPE_CHECKING:
    from agent.kube.client import KubeClient


class KubeFacts:
    def __init__(
        self,
        config: Any,
        base: Any = None,
        host: Any = None,
        ttl: float = DEFAULT_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.base = base
        self.host = host
        self.ttl = ttl
        self.clock = clock
        self._lock = threading.Lock()
        self._cache: Dict[str, Tuple[float, Any]] = {}
        self._client: Optional[KubeClient] = None

    def fact(self, name: str) -> Any:
        if name not in KUBE_FACTS:
            return self.base.fact(name) if self.base is not None else None
        with self._lock:  # checks run in threads; one API read per fact per ttl
            hit = self._cache.get(name)
            if hit is not None and self.clock() - hit[0] < self.ttl:
                return hit[1]
            value = self._read(name)
            self._cache[name] = (self.clock(), value)
            return value

    def _read(self, name: str) -> Dict[str, Any]:
        kcfg = self.config.kube
        if not kcfg.enabled:
            return {"error": "the Kubernetes API is not used (kube.enabled is false)"}
        try:
            if self._client is None:
                kc = load(kcfg.kubeconfig, kcfg.context, min(kcfg.exec_timeout, FACT_TIMEOUT_S))
                timeout = min(kcfg.request_timeout, FACT_TIMEOUT_S)
                self._client = _client_class()(kc, timeout=timeout)
            if name == "runtimeclasses":
                answer = self._client.list_runtimeclasses()
                return {"items": list(answer.get("items") or [])}
            node_name, why = self._node_name()
            if node_name is None:
                return {"error": why}
            return self._client.get_node(node_name)
        except (ApiError, Unreachable, KubeconfigError) as exc:
            return {"error": str(exc)}

    def _node_name(self) -> Tuple[Optional[str], str]:
        host = self.host
        if host is None:
            from agent.host import Host

            host = Host("/", live=True)
        kcfg = self.config.kube
        return resolve_node_name(
            host, kcfg.node_name, nodeadm_paths=kcfg.nodeadm_config_paths or NODEADM_CONFIGS
        )

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


class _Chained:
    """A host's own fact source with the API facts in front of it."""

    def __init__(self, base: Any, api: KubeFacts) -> None:
        self.base, self.api = base, api

    def fact(self, name: str) -> Any:
        if name in KUBE_FACTS:
            return self.api.fact(name)
        return self.base.fact(name) if self.base is not None else None


# `run` builds a fresh Host every cycle; the API facts (and their cache, and the client's
# connection) live across cycles so a cycle every minute does not mean a GET every minute.
_SHARED: Dict[Tuple[Any, ...], KubeFacts] = {}
_SHARED_LOCK = threading.Lock()


def with_kube_facts(base: Any, config: Any) -> Any:
    """The live host's fact source plus the API facts (agent.hosts.live_host wires this)."""
    kcfg = getattr(config, "kube", None)
    if kcfg is None:
        return base
    key = (kcfg.enabled, kcfg.kubeconfig, kcfg.context, kcfg.node_name,
           tuple(kcfg.nodeadm_config_paths), kcfg.request_timeout, kcfg.exec_timeout)
    with _SHARED_LOCK:
        api = _SHARED.get(key)
        if api is None:
            for old in _SHARED.values():  # a reload changed the settings: drop the old client
                old.close()
            _SHARED.clear()
            api = _SHARED[key] = KubeFacts(config)
    return _Chained(base, api)


def _client_class() -> "type[KubeClient]":
    from agent.kube.client import KubeClient  # imports requests: only when a request is made

    return KubeClient
