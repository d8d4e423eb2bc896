"""A 50-agent smoke run of the fleet simulation (bench/fleet/sim.py; the full table is
bench/bench_fleet.py, not run here): each agent the real Publisher, KubeFacts, KubeSession and
KubeClient with its own node and token on the API double, in-process, on simulated time:
agents start over 5 minutes, 10 steady minutes, a 1-minute apiserver outage (connections
refused), 12 minutes after it.

Expected figures come from the backoff's parameters (agent/outputs/node/publish.py `_fail`:
a wait of 2 x heartbeat_interval x U(0, 1) after a transient error, the default heartbeat
300 s) and the agent's 60 s cycle, not from a run. Nothing here measures wall time.
"""
import math

import pytest

from agent.kube.credentials import parse_rfc3339
from agent.outputs.node import publish
from bench.bench_fleet import old_fail
from bench.fleet.sim import EPOCH, Timeline, simulate

N = 50
HEARTBEAT = 300.0  # kube.heartbeat_interval, default
WINDOW = 2 * HEARTBEAT  # the jitter window after a transient error
CYCLE = 60.0  # run.fast_interval, default: the publisher runs once per cycle
TL = Timeline(spread=300.0, steady_start=300.0, steady_end=900.0, outage_start=900.0,
              outage_len=60.0, after=720.0)


@pytest.fixture(scope="module")
def fleet():
    return simulate(N, TL, seed=7)["fleet"]


def failures_in_outage(agent):
    return [(t, r) for t, r in agent.draws if TL.outage_start <= t < TL.recovery]


def first_attempt_after(agent, t):
    return min(a for a in agent.attempts if a > t)


def back_in_first_minute(fleet):
    """Failing agents whose first try after their failure fell in the minute after the outage."""
    out = 0
    for agent in fleet.agents:
        for t, _ in failures_in_outage(agent)[:1]:
            if first_attempt_after(agent, t) < TL.recovery + CYCLE:
                out += 1
    return out


def test_the_outage_was_felt(fleet):
    failing = [a for a in fleet.agents if failures_in_outage(a)]
    # a 60 s outage meets the agents whose heartbeat (every 300 s) fell due in it: ~1/5 of 50
    assert len(failing) >= 5
    assert fleet.server.refused >= len(failing)


def test_every_agents_condition_reached_the_double_after_the_outage(fleet):
    for agent in fleet.agents:
        conds = fleet.double.nodes[agent.name]["status"]["conditions"]
        mine = [c for c in conds if c["type"] == "GPUReady"]
        assert len(mine) == 1 and mine[0]["status"] == "True", agent.name
        # written after the outage: a failing agent is back within 600 s + one cycle
        assert parse_rfc3339(mine[0]["lastHeartbeatTime"]) >= EPOCH + TL.recovery, agent.name


def test_no_wait_exceeds_the_jitter_window_and_each_follows_its_draw(fleet):
    checked = 0
    for agent in fleet.agents:
        assert agent.max_wait <= WINDOW, agent.name
        for t, r in failures_in_outage(agent):
            # the next cycle at or after t + 600 x r (never the same cycle)
            cycles = max(1, math.ceil(WINDOW * r / CYCLE))
            assert first_attempt_after(agent, t) == pytest.approx(t + cycles * CYCLE), agent.name
            checked += 1
    assert checked >= 5


def test_the_minute_after_the_outage_is_bounded_by_the_jitter(fleet):
    failing = sum(1 for a in fleet.agents if failures_in_outage(a))
    # A failure at f in [900, 960) is retried in [960, 1020) only if its wait 600 x r is under
    # 1020 - f <= 120 s: probability at most 120/600 = 0.2 each; the bound is the mean plus
    # three standard deviations of that binomial.
    p = 2 * CYCLE / WINDOW
    bound = failing * p + 3 * math.sqrt(failing * p * (1 - p)) + 1
    assert back_in_first_minute(fleet) <= bound


def test_the_bound_catches_the_old_backoff(monkeypatch):
    """Control: with the former backoff (5 s doubling, x0.5..1) each agent failed once in a
    60 s outage waits at most 5 s, so every failing agent is back in the first minute: over
    the bound above."""
    monkeypatch.setattr(publish.Publisher, "_fail", old_fail)
    fleet = simulate(N, TL, seed=7)["fleet"]
    failing = sum(1 for a in fleet.agents if failures_in_outage(a))
    p = 2 * CYCLE / WINDOW
    assert back_in_first_minute(fleet) == failing
    assert failing > failing * p + 3 * math.sqrt(failing * p * (1 - p)) + 1


def test_each_agent_used_only_its_own_token_and_node(fleet):
    assert fleet.server.foreign == []
    for agent in fleet.agents:
        assert fleet.server.addressed[agent.token] == {agent.name}
    # nothing refused by authorization or admission (401/403/422) in the whole run
    assert set(fleet.server.statuses) <= {200, 201}
