"""The fleet tests/integration/test_dashboards.py queries: real `gpu-node-agent run` processes on
named fixture hosts (bundles under tests/fixtures/bundles), a target nothing listens on, and a
real Prometheus (Debian's binary) scraping them every second with prometheus/recording.yml
loaded. Also: the dashboards' targets, and Grafana's variables substituted into a query."""
import json
import re
import signal
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Tuple

from tests.integration.agentproc import (
    BUNDLES,
    REPO,
    Proc,
    Prometheus,
    free_port,
    http_get,
    start_agent,
    wait_for,
)
from tests.integration.dashboards_kube import KUBE_HOSTS, KUBE_JOB, KubeAgents

PROM_DIR = REPO / "prometheus"
DASHBOARDS = {"fleet": PROM_DIR / "dashboards" / "gpu-node-agent-fleet.json",
              "node": PROM_DIR / "dashboards" / "gpu-node-agent-node.json"}
JOB = "gpu-node-agent"
# instance label -> the bundle the agent on that "host" reads (its verdicts: the test's notes).
HOSTS = {
    "ready": "full-healthy-dra",
    "kubelet-too-old": "demo-kubelet-too-old",
    "xid-79": "xid-79-kmsg",
    "gpu-lost": "gpu-lost",
    "nvml-failed": "nvml-responsive-nvml-failed",
}
DOWN = "down"  # a target nothing listens on
# This host's agent is sent SIGHUP with an invalid config once up: it keeps running on the
# old one and reports gpu_node_agent_config_last_reload_successful 0 (docs/metrics.md).
BAD_RELOAD = "kubelet-too-old"
# Grafana's $__rate_interval is max($__interval + scrape interval, 4 x scrape interval)
# (Grafana docs, Prometheus data source, "$__rate_interval"); a 6-hour dashboard gives an
# $__interval of tens of seconds. 30 s holds many 1 s scrapes even on a loaded machine.
RATE_INTERVAL = "30s"
AGENT_CONFIG = "run:\n  fast_interval: 5\n  slow_interval: 10\n"
# One more host with a real NVML worker over the simulated libnvidia-ml (tests/nvml_sim),
# scenario hang-handle.json (every handle call blocks 60 s, a wedged driver): each request
# passes its 1 s deadline, the worker is killed and started again, so nvml_up is 0 and the
# timeout and respawn counters climb while Prometheus watches.
WEDGED = "nvml-wedged"
WEDGED_ROOT = BUNDLES / "host-foundation-only" / "root"
WEDGED_CONFIG = AGENT_CONFIG + "gpu:\n  nvml_deadline_s: 1\n  nvml_first_deadline_s: 2\n"
AGENTS = sorted([*HOSTS, WEDGED])


def wedged_env(tmp: Path) -> Dict[str, str]:
    """The environment that points the NVML worker at the simulated library in its
    hang-handle scenario; raises simlib.SimUnavailable when it cannot be built."""
    from tests.nvml_sim import simlib

    built = simlib.build(tmp / "nvsim")
    scenario = simlib.write_scenario(simlib.resolve("hang-handle.json"), tmp / "hang.json")
    env: Dict[str, str] = simlib.worker_env(built, scenario)
    env.pop("LD_PRELOAD", None)
    return env


def targets(board: str) -> Iterator[Tuple[str, str, str]]:
    """(panel title, refId, expr) for every target of every panel of a dashboard."""
    doc = json.loads(DASHBOARDS[board].read_text())
    for panel in doc["panels"]:
        for target in panel.get("targets", []):
            yield panel["title"], target["refId"], target["expr"]


def substitute(expr: str, job: str, instance: str = "") -> str:
    """Grafana's variables as its Prometheus data source interpolates one selected value: as
    is, no regex escaping (the names here hold no regex metacharacters)."""
    assert not re.search(r"[\\.*+?()\[\]{}|^$\"]", job + instance), (job, instance)
    out = expr.replace("$__rate_interval", RATE_INTERVAL).replace("$job", job)
    return out.replace("$instance", instance)


class RulesPrometheus(Prometheus):
    """Prometheus with the recording rules loaded, scrape and evaluation every second."""

    def __init__(self, tmp: Path, scrape_configs: List[Dict[str, Any]]) -> None:
        super().__init__(tmp, scrape_configs, rule_files=[PROM_DIR / "recording.yml"])

    def query(self, expr: str) -> List[Dict[str, Any]]:
        import urllib.error
        import urllib.parse

        url = self.base + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        try:
            doc = json.loads(http_get(url, 10))
        except urllib.error.HTTPError as exc:  # 400: the query does not parse; say which
            raise AssertionError(f"{expr}: {exc.read()[:500]!r}") from None
        assert doc["status"] == "success", doc
        assert doc["data"]["resultType"] == "vector", (expr, doc["data"]["resultType"])
        return list(doc["data"]["result"])


class Fleet:
    """The agents and Prometheus; stop() ends every process this started."""

    def __init__(self, tmp: Path, env: Dict[str, str]) -> None:
        """``env``: wedged_env()'s."""
        self.agents: List[Proc] = []
        self.prom: Any = None
        self.kube: Any = None  # the agents publishing to a Node (dashboards_kube.py)
        try:
            static = []
            for name, bundle in HOSTS.items():
                agent, port = start_agent(tmp, ["--bundle", str(BUNDLES / bundle)], AGENT_CONFIG,
                                          name=name)
                self.agents.append(agent)
                if name == BAD_RELOAD:
                    (tmp / f"{name}.yaml").write_text(AGENT_CONFIG + "  bogus_key: 1\n")
                    agent.signal(signal.SIGHUP)
                    wait_for(lambda a=agent: "config reload failed" in a.text(), 30,
                             "the refused reload")
                static.append({"targets": [f"127.0.0.1:{port}"], "labels": {"instance": name}})
            agent, port = start_agent(tmp, ["--host-root", str(WEDGED_ROOT), "--nvml"],
                                      WEDGED_CONFIG, env=env, name=WEDGED)
            self.agents.append(agent)
            static.append({"targets": [f"127.0.0.1:{port}"], "labels": {"instance": WEDGED}})
            static.append({"targets": [f"127.0.0.1:{free_port()}"], "labels": {"instance": DOWN}})
            self.kube = KubeAgents(tmp / "kube")
            kube_static = [{"targets": [f"127.0.0.1:{port}"], "labels": {"instance": name}}
                           for name, port in self.kube.ports.items()]
            self.prom = RulesPrometheus(tmp, [{"job_name": JOB, "static_configs": static},
                                              {"job_name": KUBE_JOB,
                                               "static_configs": kube_static}])
            self._settle()
        except BaseException:
            self.stop()
            raise

    def _settle(self) -> None:
        """Until every target has been scraped 5 times, the rules have been evaluated 3
        times over every agent's series (a rate needs two samples in its window), the refused
        reload is served and the wedged host's NVML counters have risen under Prometheus."""
        want = len(AGENTS) + 1

        def ready() -> bool:
            scraped = self.prom.query(f'count_over_time(up{{job="{JOB}"}}[1m]) >= 5')
            recorded = self.prom.query(
                "count_over_time(instance_path:gpu_node_agent_gate_open:configured"
                f'{{job="{JOB}"}}[1m]) >= 3')
            refused = self.prom.query(
                f'gpu_node_agent_config_last_reload_successful{{job="{JOB}"}} == 0')
            climbed = [self.prom.query(f'increase(gpu_node_agent_nvml_{c}{{job="{JOB}"}}[1h]) > 0')
                       for c in ("timeouts_total", "worker_respawns_total")]
            # the Node agents publish after their first Report: each has read its Node
            published = self.prom.query(f'gpu_node_agent_node_cordoned{{job="{KUBE_JOB}"}}')
            return (len(scraped) == want and len(recorded) == len(AGENTS) and len(refused) == 1
                    and all(len(c) == 1 for c in climbed) and len(published) == len(KUBE_HOSTS))

        wait_for(ready, 60, "5 scrapes of every target and the recording rules", 0.5)

    def stop(self) -> None:
        if self.prom is not None:
            self.prom.stop()
        if self.kube is not None:
            self.kube.stop()
        for agent in self.agents:
            agent.stop()


def label_sets(result: List[Mapping[str, Any]]) -> Dict[Tuple[Tuple[str, str], ...], float]:
    """A query's result as {sorted label pairs: value}."""
    return {tuple(sorted(r["metric"].items())): float(r["value"][1]) for r in result}
