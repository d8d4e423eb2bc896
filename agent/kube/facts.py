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
from typing import Any, Callable, Dict, Optional, Tuple

from agent.kube.errors import ApiError, Unreachable
from agent.kube.kubeconfig import KubeconfigError
from agent.kube.session import KubeSession, settings_key, shared_session

KUBE_FACTS = ("node", "runtimeclasses")
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
        host: Any = None,
        ttl: float = DEFAULT_TTL_S,
        clock: Callable[[], float] = time.monotonic,
        session: Optional[KubeSession] = None,
    ) -> None:
        self.config = config
        self.base = base
        self.host = host
        self.ttl = ttl
        self.clock = clock
        self.session = session if session is not None else KubeSession(config.kube, host, clock)
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
            value = self._runtimeclasses()
            self._cache[name] = (self.clock(), value)
            return value

    def _runtimeclasses(self) -> Dict[str, Any]:
        try:
            answer = self.session.client().list_runtimeclasses(timeout=FACT_TIMEOUT_S)
            return {"items": list(answer.get("items") or [])}
        except (ApiError, Unreachable, KubeconfigError) as exc:
            return {"error": str(exc)}

    def close(self) -> None:
        self.session.close()


class _Chained:
    """A host's own fact source with the API facts in front of it."""

    def __init__(self, base: Any, api: KubeFacts) -> None:
        self.base, self.api = base, api

    def fact(self, name: str) -> Any:
        if name in KUBE_FACTS:
            return self.api.fact(name)
        return self.base.fact(name) if self.base is not None else None


# `run` builds a fresh Host every cycle; the API facts (and their cache, and the session's
# connection) live across cycles so a cycle every minute does not mean a GET every minute.
_SHARED: Dict[Tuple[Any, ...], KubeFacts] = {}
_SHARED_LOCK = threading.Lock()


def with_kube_facts(base: Any, config: Any) -> Any:
    """The live host's fact source plus the API facts (agent.host.build.live_host wires this); the
    session is the process's shared one, which the publisher uses too."""
    kcfg = getattr(config, "kube", None)
    if kcfg is None:
        return base
    key = settings_key(kcfg)
    with _SHARED_LOCK:
        api = _SHARED.get(key)
        if api is None:
            _SHARED.clear()  # a reload changed the settings (shared_session closes the old one)
            api = _SHARED[key] = KubeFacts(config, session=shared_session(config))
    return _Chained(base, api)
