"""The API side of the composition root: the Node identity, resolved once, and the one API
session per process and kube settings, handed to the host facts and to the Node publisher.

`check` builds one ApiWiring around the Host it opened; `run` (agent/cli_run.py) builds one for
the process, so the Hosts it opens every cycle, and the Publisher of every config generation,
share one session: one client, one exec-plugin run per credential lifetime, one Node read that
the checks and the publisher both use (docs/architecture.md, "the composition root").
A reload whose kube settings differ (agent/kube/session.py settings_key) closes the old session
and resolves the identity again; one with the same settings keeps both.

The kube wing (TLS, credentials, the Node name lookup) is imported on first use: `check
--bundle` makes an ApiWiring it never asks for a session, so its start-up does not pay for
ssl, email and the client (bench/bench_footprint.py, `-X importtime`).
"""
import threading
from typing import TYPE_CHECKING, Any, Callable, Optional, Tuple

from agent.errors import ConfigError

if TYPE_CHECKING:
    from agent.host.seam import Host
    from agent.kube.facts import KubeFacts
    from agent.kube.session import KubeSession


def this_host() -> "Host":
    """The live machine, for the name lookup only (files and the hostname: no commands, no
    GPUs). Built here, at the composition root, when no Host was opened yet (`run` makes its
    Publisher before the first cycle)."""
    from agent.host.seam import Host

    return Host("/", description="this host", live=True)


class ApiWiring:
    def __init__(self, name_host: Callable[[], Any] = this_host) -> None:
        self._name_host = name_host
        self._lock = threading.Lock()
        self._key: Optional[Tuple[Any, ...]] = None
        self._session: Optional[KubeSession] = None
        self._facts: Optional[KubeFacts] = None

    def session(self, config: Any, host: Any = None) -> "KubeSession":
        """The session for ``config``'s kube settings: the same one while they stay the same,
        a new one (the old closed) when they change. ``host``: where to read the Node name
        from when it must be resolved (default: this machine)."""
        return self._current(config, host)[0]

    def facts(self, config: Any, host: Any = None) -> "KubeFacts":
        """The API facts over that session (their cache lives as long as it does)."""
        return self._current(config, host)[1]

    def _current(self, config: Any, host: Any) -> Tuple["KubeSession", "KubeFacts"]:
        from agent.kube.facts import KubeFacts
        from agent.kube.session import KubeSession, settings_key

        key = settings_key(config.kube)
        with self._lock:
            if self._session is None or key != self._key:
                if self._session is not None:
                    self._session.close()
                self._session = KubeSession(config.kube, self._lookup(config.kube, host))
                self._facts = KubeFacts(config, session=self._session)
                self._key = key
            assert self._facts is not None
            return self._session, self._facts

    @staticmethod
    def require_configured_kubeconfig(config: Any, origin: Optional[str]) -> None:
        """`check` on this machine: a kubeconfig the config file names (`kube.kubeconfig`)
        must exist; it is never replaced by the search for the kubelet's, so a missing one is
        the configuration's error (ConfigError, exit 2), not a verdict line. `run` does not
        call this: a daemon started before the node joins waits for its kubeconfig."""
        from agent.kube.kubeconfig_path import configured_but_missing

        problem = configured_but_missing(config, origin)
        if problem:
            raise ConfigError(problem)

    def wrap(self, host: Any, config: Any) -> Any:
        """The live ``host`` with the API facts (`node`, `runtimeclasses`) of this process."""
        from agent.kube.facts import with_kube_facts

        return with_kube_facts(host, self.facts(config, host))

    def _lookup(self, kcfg: Any, host: Any) -> Callable[[], Tuple[Optional[str], str]]:
        """The name lookup the session runs once, when it first needs the name: on ``host``
        (the Host the command opened), else on this machine."""

        def resolve() -> Tuple[Optional[str], str]:
            from agent.kube.nodename import node_identity

            return node_identity(kcfg, host if host is not None else self._name_host())

        return resolve

    def close(self) -> None:
        with self._lock:
            if self._session is not None:
                self._session.close()
