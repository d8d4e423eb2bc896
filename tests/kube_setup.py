"""Set-up shared by the tests that drive the Publisher against the HTTPS API double
(tests/kube_double.py): the node name, a fake clock, the double serving one Node with a node
token and a kubeconfig pointing at it, and a Publisher on that kubeconfig."""
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

from agent.config import Config
from agent.outputs.node.publish import Publisher
from tests.kube_double import KubeDouble, kubeconfig_yaml

NODE = "gpu-host-1"
T0 = 1_800_000_000.0


class Clock:
    """A settable clock: tests move `t` by hand so every bound is asserted on this clock."""

    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def serve_node(tmp_path: Any, labels: Optional[Dict[str, str]] = None,
               token: str = "node-token") -> Iterator[Tuple[KubeDouble, str]]:
    """Body of an `api` fixture (`yield from serve_node(tmp_path)`): the double started with
    NODE registered and `token` authenticating as system:node:NODE; yields (double, kubeconfig
    path) and stops the double afterwards."""
    double = KubeDouble(str(tmp_path)).start()
    try:
        double.add_node(NODE, labels=labels)
        double.add_token(token, f"system:node:{NODE}")
        kc = tmp_path / "kubeconfig"
        kc.write_text(kubeconfig_yaml(double.url, double.ca.path, {"token": token}))
        yield double, str(kc)
    finally:
        double.stop()


def make_publisher(kc: str, clock: Callable[[], float], dry_run: bool = False,
                   extra: Optional[Dict[str, Any]] = None, **kube: Any) -> Publisher:
    """A Publisher on kubeconfig `kc` for NODE with a 2 s request timeout, the given clock and
    a jitter source fixed at 1.0; `kube` overrides the kube section, `extra` adds top-level
    config sections."""
    kube.setdefault("node_name", NODE)
    data: Dict[str, Any] = {"kube": {"kubeconfig": kc, "request_timeout": 2, **kube}}
    data.update(extra or {})
    return Publisher(Config.model_validate(data), dry_run=dry_run, clock=clock, rng=lambda: 1.0)
