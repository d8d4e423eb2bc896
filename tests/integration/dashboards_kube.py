"""Agents of tests/integration/test_dashboards.py that publish to a Node: the real Daemon (as
`run` assembles it, agent/daemon/service.py) in this process, with its Node publisher writing
to the HTTPS API double (tests/kube_double.py), since `run` on a fixture (--bundle,
--host-root) never publishes (agent/cli_run.py). Their own scrape job (KUBE_JOB), so the
bundle hosts' expectations stay as they are.

- cordoned: gpu-xid fails and `kube.cordon_on_fatal: true`: the agent cordons its Node
  (gpu_node_agent_node_cordoned 1).
- not-cordoning: the same failing gpu-xid, `kube.cordon_on_fatal` left at its default (false):
  its Node stays schedulable (gpu_node_agent_node_cordoned 0), though the cordon trigger holds.
"""
import threading
from pathlib import Path
from typing import Any, Dict, List, Tuple

from agent.config import Config
from agent.daemon.sdnotify import Notifier
from agent.daemon.service import Daemon, Generation
from agent.logs import setup
from agent.model import Check, Interval, Severity, failed
from agent.outputs.node.publish import Publisher
from tests.kube_double import KubeDouble, kubeconfig_yaml
from tests.reliability.helpers import tree_source

KUBE_JOB = "gpu-node-agent-kube"
# instance label -> (Node name, kube.cordon_on_fatal)
KUBE_HOSTS: Dict[str, Tuple[str, bool]] = {
    "cordoned": ("gpu-host-1", True),
    "not-cordoning": ("gpu-host-2", False),
}


def _xid_check() -> Check:
    """gpu-xid failing with a fault it does not pin to GPUs, so no min_healthy_gpus spares it
    (agent/outputs/node/condition.py fatal_faults)."""
    return Check(id="gpu-xid", title="XID", severity=Severity.CRITICAL,
                 gates=("dra", "device-plugin", "operator-clusterpolicy", "operator-gpucluster"),
                 interval=Interval.FAST, remediation="-",
                 run=lambda h, p: failed("XID 79: GPU has fallen off the bus"))


class KubeAgents:
    """The API double and one Daemon per KUBE_HOSTS entry; stop() ends them all."""

    def __init__(self, tmp: Path) -> None:
        tmp.mkdir(exist_ok=True)
        self.double = KubeDouble(str(tmp)).start()
        self.running: List[Tuple[Daemon, threading.Thread, Publisher]] = []
        self.ports: Dict[str, int] = {}
        try:
            for instance, (node, cordon) in KUBE_HOSTS.items():
                self.double.add_node(node)
                token = f"token-{node}"
                self.double.add_token(token, f"system:node:{node}")
                kc = tmp / f"{instance}.kubeconfig"
                kc.write_text(kubeconfig_yaml(self.double.url, self.double.ca.path,
                                              {"token": token}))
                root = tmp / instance
                root.mkdir()
                self.ports[instance] = self._start(instance, root, Config.model_validate({
                    "run": {"fast_interval": 1, "slow_interval": 10,
                            "listen_address": "127.0.0.1:0"},
                    "kube": {"kubeconfig": str(kc), "node_name": node, "request_timeout": 2,
                             "cordon_on_fatal": cordon},
                }))
        except BaseException:
            self.stop()
            raise

    def _start(self, instance: str, root: Path, config: Any) -> int:
        pub = Publisher(config)
        daemon = Daemon([_xid_check()], lambda: Generation(config, None, None, "dra", []),
                        tree_source(str(root)), "9", setup(), notifier=Notifier({}),
                        outputs=[pub])
        thread = threading.Thread(target=daemon.serve, kwargs={"install_signals": False},
                                  name=f"agent-{instance}", daemon=True)
        thread.start()
        self.running.append((daemon, thread, pub))
        return int(daemon.server.port)

    def node(self, instance: str) -> Dict[str, Any]:
        return dict(self.double.nodes[KUBE_HOSTS[instance][0]])

    def stop(self) -> None:
        for daemon, thread, pub in self.running:
            daemon.stop()
            thread.join(10)
            pub.close()
        self.running = []
        self.double.stop()
