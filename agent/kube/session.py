"""One connection to the API per process and setting: the kubeconfig (so an exec plugin runs
once per credential lifetime), the client, the node name, and the last Node read, shared by
the host facts (agent/kube/facts.py: checks read the Node) and the publisher (which writes
it). One `check --apply` therefore reads the Node once: allocation-owner's read is the one the
publisher plans against.

Nothing here writes. Errors of a read are remembered like a Node, so a read that failed for
the checks is not repeated by the publisher within the same max_age.

Nothing here builds a Host or looks for the Node name: the composition root (agent/cli_kube.py)
resolves the identity once (agent/kube/nodename.py node_identity, over the Host it built) and
hands it in, and it keeps the one session per process and kube settings
(docs/architecture.md, "the composition root").
"""

import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Tuple, Union

from agent.kube.credentials import CredentialError
from agent.kube.errors import ApiError, Unreachable, sanitize
from agent.kube.keymaterial import client_cert_cn
from agent.kube.kubeconfig import KubeconfigError, load
from agent.kube.kubeconfig_path import choose

if TYPE_CHECKING:
    from agent.kube.client import KubeClient

NODE_PREFIX = "system:node:"


class NoCredentials(KubeconfigError):
    """The kubeconfig's user has nothing to authenticate with: every request would reach the
    server as system:anonymous. Found locally, before any request."""


def settings_key(kcfg: Any) -> Tuple[Any, ...]:
    return (
        kcfg.enabled,
        kcfg.kubeconfig,
        kcfg.context,
        kcfg.node_name,
        tuple(kcfg.nodeadm_config_paths),
        kcfg.request_timeout,
        kcfg.exec_timeout,
    )


Identity = Tuple[Optional[str], str]  # (the Node name, where it came from) or (None, why)


def configured_identity(kcfg: Any) -> Identity:
    """The identity from the config alone (`kube.node_name`), for a session nobody resolved
    a name for (tests, the benchmark): no file of any host is read."""
    if kcfg.node_name:
        return kcfg.node_name, "config kube.node_name"
    return None, "no node name: set kube.node_name in the config"


class KubeSession:
    def __init__(
        self,
        kcfg: Any,
        identity: Union[None, Identity, Callable[[], Identity]] = None,
        monotonic: Callable[[], float] = time.monotonic,
        http: Optional[Callable[[], Any]] = None,
    ) -> None:
        """``identity``: the Node name and its source, or the composition root's lookup that
        gives it, called at most once, on first use (a `check` that never reads the Node reads
        no name file); None: `kube.node_name` alone. ``http``: makes the client's
        requests.Session (default: a plain one); the fleet simulation (bench/fleet/) hands one
        that answers in-process, so everything above the transport is the real client."""
        self.kcfg = kcfg
        self.key = settings_key(kcfg)
        self.monotonic = monotonic
        self._http = http
        self._lock = threading.RLock()
        self._client: Optional[KubeClient] = None
        self._identity = identity if identity is not None else configured_identity(kcfg)
        # (time of the read in the caller's clock, the Node or the error it raised)
        self._node: Optional[Tuple[float, Union[Dict[str, Any], Exception]]] = None
        self.reads = 0  # Node GETs sent (for tests and the benchmark)
        # (path, how it was chosen) of the kubeconfig the client was built on, for the report
        # (agent/kube/kubeconfig_path.py: the configured one, or the kubelet's where found).
        self.kubeconfig_used: Optional[Tuple[str, str]] = None

    # -- the pieces -----------------------------------------------------------------------
    def client(self) -> "KubeClient":
        """The one client; raises KubeconfigError (NoCredentials included) or Unreachable."""
        with self._lock:
            if self._client is None:
                chosen = choose(self.kcfg)  # searched again until a client is built
                kc = load(chosen.path, self.kcfg.context, self.kcfg.exec_timeout)
                try:
                    _require_credentials(kc)
                except NoCredentials:
                    kc.close()
                    raise
                http = None if self._http is None else self._http()
                self._client = _client_class()(kc, timeout=self.kcfg.request_timeout,
                                               session=http)
                self.kubeconfig_used = (chosen.path, chosen.source)
            return self._client

    def node_name(self) -> Identity:
        """(name, where it came from) or (None, why): as the composition root resolved it."""
        with self._lock:
            if callable(self._identity):
                self._identity = self._identity()
            return self._identity

    def read_node(
        self,
        now: Optional[float] = None,
        max_age: float = 0.0,
        timeout: Optional[float] = None,
    ) -> Dict[str, Any]:
        """The Node, from the last read when it is younger than ``max_age`` (a remembered
        error is raised again), else a GET. Raises ApiError, Unreachable, KubeconfigError."""
        now = self.monotonic() if now is None else now
        with self._lock:
            hit = self._node
            if hit is not None and 0 <= now - hit[0] < max_age:
                if isinstance(hit[1], Exception):
                    raise hit[1]
                return hit[1]
            name, why = self.node_name()
            if name is None:
                raise KubeconfigError(why)
            try:
                self.reads += 1
                node = self.client().get_node(name, timeout=timeout)
            except (ApiError, Unreachable, KubeconfigError) as exc:
                self._node = (now, exc)
                raise
            self._node = (now, node)
            return node

    def remember(self, node: Dict[str, Any], now: Optional[float] = None) -> None:
        """A write's answer is the whole Node: it is the freshest read."""
        with self._lock:
            self._node = (self.monotonic() if now is None else now, node)

    def forget(self) -> None:
        with self._lock:
            self._node = None

    def identity(self) -> Tuple[Optional[str], str]:
        """(the user the server takes the credentials for, how we know), for hints: the
        client certificate's CN, else a SelfSubjectReview (tokens, exec plugins)."""
        try:
            client = self.client()
            creds = client.kubeconfig.credentials()
        except (KubeconfigError, CredentialError, Unreachable) as exc:  # a hint only
            return None, f"unknown ({sanitize(exc, 80)})"
        cert_file = getattr(creds, "cert_file", None)
        if cert_file and not getattr(creds, "token", None):
            try:
                with open(cert_file, "rb") as fh:
                    cn = client_cert_cn(fh.read(65536))
            except OSError:
                cn = None
            if cn:
                return cn, "the client certificate's CN"
        try:
            review = client.self_subject_review()
        except (ApiError, Unreachable) as exc:
            return None, f"unknown (SelfSubjectReview: {sanitize(exc, 80)})"
        user = ((review.get("status") or {}).get("userInfo") or {}).get("username")
        how = "exec plugin" if client.kubeconfig.exec_spec is not None else "token"
        return (str(user) if user else None), f"a SelfSubjectReview ({how} credentials)"

    def close(self) -> None:
        """Drop the client (and the kubeconfig's temporary files); the next use opens a new
        one, so a session closed under a user (a config reload) still works."""
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None
            self._node = None


def _require_credentials(kc: Any) -> None:
    if kc.exec_spec is not None:
        return
    try:
        creds = kc.credentials()
    except CredentialError:  # a tokenFile that is configured but unreadable: it has one
        return
    if not creds.token and not getattr(creds, "cert_file", None):
        raise NoCredentials(
            f"{kc.path}: context {kc.context_name!r} has no credentials (no client certificate, "
            "token, tokenFile or exec plugin): the API would see system:anonymous; nothing sent"
        )


def node_identity_name(user: Optional[str]) -> Optional[str]:
    if user and user.startswith(NODE_PREFIX):
        return user[len(NODE_PREFIX) :]
    return None


def _client_class() -> "type[KubeClient]":
    from agent.kube.client import KubeClient  # imports requests: only when a request is made

    return KubeClient
