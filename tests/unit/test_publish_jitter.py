"""The publisher's wait after an API error (agent/outputs/node/publish.py `_fail`): full jitter
("Exponential Backoff And Jitter", AWS Architecture Blog: a uniform draw from 0 to the
window) over 2 x min(kube.heartbeat_interval, 300 s), from the first error; a 403 holds at
least 300 s; Retry-After is honoured up to one heartbeat interval. Seeded RNGs; no network
(nothing here sends a request)."""
import random

import pytest

from agent.config import Config
from agent.kube.errors import ApiError
from agent.outputs.node.publish import Publisher, retry_ceiling


def publisher(rng, **kube):
    cfg = Config.model_validate({"kube": {"kubeconfig": "/nonexistent/kubeconfig",
                                          "node_name": "n", **kube},
                                 "nfd": {"enabled": False, "path": "/nonexistent/x"}})
    return Publisher(cfg, clock=lambda: 1000.0, rng=rng)


def wait_after(pub, exc=None, mono=1000.0):
    pub._fail(mono, exc)
    return pub._next_attempt - mono


def test_the_wait_is_the_draw_times_two_heartbeats_from_the_first_error():
    draws = random.Random(11)
    replay = random.Random(11)
    pub = publisher(draws.random)
    for _ in range(20):  # no growth: the 1st and the 20th failure use the same window
        assert wait_after(pub) == pytest.approx(600.0 * replay.random())


def test_the_waits_spread_over_the_whole_window():
    pub = publisher(random.Random(5).random)
    waits = [wait_after(pub) for _ in range(2000)]
    assert min(waits) >= 0.0 and max(waits) <= 600.0
    # uniform on [0, 600]: mean 300, standard error 600 / sqrt(12 x 2000) = 3.9 s
    assert abs(sum(waits) / len(waits) - 300.0) < 4 * 3.9
    # a tenth of the draws in each 60 s slice (binomial, n 2000, p 0.1: sd 13.4)
    for k in range(10):
        n = sum(1 for w in waits if 60 * k <= w < 60 * (k + 1))
        assert abs(n - 200) < 4 * 13.4


@pytest.mark.parametrize("heartbeat,window", [(60.0, 120.0), (300.0, 600.0), (3600.0, 600.0)])
def test_the_window_follows_the_heartbeat_up_to_300_s(heartbeat, window):
    assert wait_after(publisher(lambda: 1.0, heartbeat_interval=heartbeat)) == window
    assert wait_after(publisher(lambda: 0.5, heartbeat_interval=heartbeat)) == window / 2


def test_a_403_still_holds_300_s_and_retry_after_is_honoured_up_to_a_heartbeat():
    assert wait_after(publisher(lambda: 0.0), ApiError(403, "forbidden")) == 300.0
    assert wait_after(publisher(lambda: 0.0), ApiError(429, "slow down", 120.0)) == 120.0
    assert wait_after(publisher(lambda: 0.0), ApiError(429, "slow down", 1e12)) == 300.0
    # the draw wins when it is the longer wait
    assert wait_after(publisher(lambda: 0.5), ApiError(429, "slow down", 120.0)) == 300.0


@pytest.mark.parametrize("heartbeat,ceiling", [(60.0, 300.0), (300.0, 600.0), (3600.0, 3600.0)])
def test_the_ceiling(heartbeat, ceiling):
    # the window (2 x min(heartbeat, 300)), a 403's 300 s hold, or a Retry-After's heartbeat
    assert retry_ceiling(heartbeat) == ceiling
