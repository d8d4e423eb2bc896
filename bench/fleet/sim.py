"""A fleet of agents in one process, on simulated time, against one API double.

Each agent is the real Publisher (agent/outputs/node/publish.py: reconcile, heartbeat,
resync, backoff with its jitter drawn from the agent's own seeded RNG) and the real KubeFacts
(agent/kube/facts.py) over its own real KubeSession and KubeClient, loaded from its own
kubeconfig file holding its own bearer token, which the double maps to system:node:<its name>.
A discrete-event scheduler (a heap of cycle times) runs each agent's cycle every
`run.fast_interval` as bench/bench_kube.py does for one node: the `node` fact
(allocation-owner, every cycle), the `runtimeclasses` fact every `run.slow_interval`
(runtimeclass-handler), then one publish. The clock every one of them reads is the
scheduler's. What is not real: the checks themselves (a fixed healthy report), and the
network (bench/fleet/transport.py).

Agents start at uniformly random times over `spread` seconds (nodes join a fleet over time, so
their heartbeats are not in phase); the steady window follows the warm-up.
"""

import heapq
import random
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from agent.config import Config
from agent.kube.facts import KubeFacts
from agent.kube.session import KubeSession
from agent.model import ALL_PATHS, CheckResult, Severity, Status
from agent.outputs.node.publish import Publisher
from agent.report import build_report
from bench.fleet.transport import FleetServer
from tests.kube_double import KubeDouble, kubeconfig_yaml

EPOCH = 1_800_000_000.0  # simulated wall time of t = 0 (2027-01-15)


def healthy_report() -> Any:
    results = [
        CheckResult(cid, cid, Severity.CRITICAL, Status.PASS, "ok", "", ALL_PATHS, {}, 0.0)
        for cid in ("driver-loaded", "nvml-responsive", "gpu-ecc", "gpu-xid", "allocation-owner")
    ]
    return build_report(results, "dra", False, "fleet", 0.0, "fleet")


@dataclass
class Agent:
    name: str
    token: str
    pub: Publisher
    facts: KubeFacts
    next_slow: float
    cycles: int = 0
    errors: int = 0
    max_wait: float = 0.0  # the longest backoff wait the publisher set (seconds)
    recovered_at: Optional[float] = None  # first successful publish after the outage
    failing: bool = False
    draws: List[Tuple[float, float]] = field(default_factory=list)  # (t, jitter drawn)
    attempts: List[float] = field(default_factory=list)  # cycles that sent a request


@dataclass
class Timeline:
    spread: float = 3600.0  # agents start uniformly over [0, spread)
    steady_start: float = 3600.0
    steady_end: float = 7200.0
    outage_start: float = 7200.0
    outage_len: float = 300.0
    after: float = 1800.0  # observed after the outage ends

    @property
    def recovery(self) -> float:
        return self.outage_start + self.outage_len

    @property
    def end(self) -> float:
        return self.recovery + self.after


class Fleet:
    def __init__(self, n: int, tmp: str, seed: int = 1, fast: float = 60.0,
                 slow: float = 900.0) -> None:
        self.now = 0.0
        self.fast, self.slow = fast, slow
        self.rng = random.Random(seed)
        self.double = KubeDouble(tmp)
        self.double.add_runtimeclass("nvidia", "nvidia")
        self.server = FleetServer(self.double, lambda: self.now)
        self.report = healthy_report()
        self.agents: List[Agent] = []
        self.config_sample: Any = None
        for i in range(n):
            self.agents.append(self._agent(i, Path(tmp), seed))

    def _clock(self) -> float:
        return EPOCH + self.now

    def _agent(self, i: int, tmp: Path, seed: int) -> Agent:
        name, token = f"gpu-node-{i:05d}", f"token-{seed}-{i}-{self.rng.getrandbits(64):016x}"
        self.double.add_node(name)
        self.double.add_token(token, f"system:node:{name}")
        kc = tmp / f"kubeconfig-{i}"
        kc.write_text(kubeconfig_yaml("https://127.0.0.1:6443", self.double.ca.path,
                                      {"token": token}))
        cfg = Config.model_validate({
            "kube": {"kubeconfig": str(kc), "node_name": name},
            "nfd": {"enabled": False, "path": str(tmp / "no-nfd" / "x")},
        })
        self.config_sample = cfg
        session = KubeSession(cfg.kube, None, self._clock, http=self.server.session)
        rng = random.Random(seed * 1_000_003 + i).random
        draws: List[Tuple[float, float]] = []

        def jitter() -> float:  # the agent's own seeded RNG, each draw kept for the tests
            value = rng()
            draws.append((self.now, value))
            return value

        pub = Publisher(cfg, clock=self._clock, rng=jitter, session=session)
        pub.log_errors = False  # 5,000 agents x an outage of warnings is not a measurement
        facts = KubeFacts(cfg, clock=self._clock, session=session)
        return Agent(name, token, pub, facts, next_slow=0.0, draws=draws)

    def run(self, tl: Timeline) -> None:
        heap = []
        for idx, agent in enumerate(self.agents):
            start = self.rng.uniform(0.0, tl.spread)
            agent.next_slow = start
            heap.append((start, idx))
        heapq.heapify(heap)
        while heap:
            t, idx = heapq.heappop(heap)
            if t >= tl.end:
                break
            self.now = t
            self.server.down = tl.outage_start <= t < tl.recovery
            self._cycle(self.agents[idx], t, tl)
            heapq.heappush(heap, (t + self.fast, idx))

    def _cycle(self, agent: Agent, t: float, tl: Timeline) -> None:
        agent.cycles += 1
        agent.facts.fact("node")
        if t >= agent.next_slow:
            agent.facts.fact("runtimeclasses")
            agent.next_slow += self.slow
        before = agent.pub.stats["attempts"]
        result = agent.pub.publish(self.report)
        attempted = agent.pub.stats["attempts"] > before
        if attempted:
            agent.attempts.append(t)
        if result.error:
            agent.errors += 1
            wait = agent.pub._next_attempt - (EPOCH + t)
            agent.max_wait = max(agent.max_wait, wait)
            agent.failing = True
        elif attempted and agent.failing:
            agent.failing = False
            if agent.recovered_at is None and t >= tl.recovery:
                agent.recovered_at = t

    def close(self) -> None:
        for agent in self.agents:
            agent.pub.close()


def rate_stats(fleet: Fleet, tl: Timeline) -> Dict[str, float]:
    """The figures of the fleet table, from the server's per-second counts."""
    per = fleet.server.per_second
    n = len(fleet.agents)
    steady = [per.get(s, 0) for s in range(int(tl.steady_start), int(tl.steady_end))]
    span = len(steady)
    minutes = [sum(steady[i:i + 60]) / 60.0 for i in range(0, span - 59, 60)]
    mean = sum(steady) / span
    r = int(tl.recovery)
    post = [per.get(s, 0) for s in range(r, r + 60)]
    after = [per.get(s, 0) for s in range(r, int(tl.end))]
    after_minutes = [sum(after[i:i + 60]) / 60.0 for i in range(0, len(after) - 59, 60)]
    writes = sum(fleet.server.writes_per_second.get(s, 0)
                 for s in range(int(tl.steady_start), int(tl.steady_end)))
    recovered = [a.recovered_at for a in fleet.agents if a.recovered_at is not None]
    return {
        "n": n,
        "mean": mean,
        "peak_1s": max(steady),
        "peak_60s": max(minutes),
        "post_minute": sum(post) / 60.0,
        "post_peak_1s": max(post),
        "post_ratio": (sum(post) / 60.0) / mean if mean else float("inf"),
        "after_peak_60s": max(after_minutes) if after_minutes else 0.0,
        "writes_per_node_hour": writes / n / (span / 3600.0),
        "requests_per_node_hour": sum(steady) / n / (span / 3600.0),
        "refused": fleet.server.refused,
        "recovered": len(recovered),
        "last_recovery_s": (max(recovered) - tl.recovery) if recovered else float("nan"),
        "max_wait": max(a.max_wait for a in fleet.agents),
    }


def simulate(n: int, tl: Timeline, seed: int = 1) -> Dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        fleet = Fleet(n, tmp, seed)
        try:
            fleet.run(tl)
        finally:
            fleet.close()
        return {"stats": rate_stats(fleet, tl), "fleet": fleet}
