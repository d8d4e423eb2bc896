"""The API load of a fleet: N agents (bench/fleet/sim.py: the real Publisher, KubeFacts,
KubeSession and KubeClient of each, its own node and token on the API double) over simulated
time: a warm-up hour in which the agents start at random times, a steady hour at default
intervals, a 5-minute apiserver outage (connections refused) and 30 minutes after it.

    python bench/bench_fleet.py [--agents 100,1000,5000] [--seed 1] [--compare-old]

Prints the fleet table: requests per second at the server over the steady hour (mean; peak
of 1-s and of 60-s bins), the rate in the minute after the outage and its ratio to the steady
mean (target <= 2), the peak 60-s bin in the 30 minutes after the outage, writes and requests
per node-hour, refused connections, the seconds until the last failing agent wrote again, and
how long the simulation took (wall and CPU seconds of this process). `--compare-old` reruns
each N with the backoff the publisher had before (5 s doubling to 300 s, x0.5..1 jitter), as
a reference measured in the same run.
Not in CI (5,000 agents take minutes); tests/unit/test_fleet_smoke.py runs 50.
"""
import argparse
import sys
import time
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from agent.outputs.node import publish  # noqa: E402
from bench.fleet.sim import Timeline, simulate  # noqa: E402


def old_fail(self: Any, mono: float, exc: Optional[Any]) -> None:
    """The publisher's backoff before full jitter (git history of publish.py, `_fail`)."""
    self._failures += 1
    self._stale = True
    delay = min(publish.BACKOFF_CAP_S, 5.0 * 2 ** min(self._failures - 1, 16))
    delay *= 0.5 + 0.5 * self.rng()
    if exc is not None and exc.status == 403:
        delay = max(delay, publish.FORBIDDEN_WAIT_S)
    if exc is not None and exc.retry_after is not None:
        delay = max(delay, min(exc.retry_after, self.kcfg.heartbeat_interval))
    self._next_attempt = mono + min(delay, max(publish.BACKOFF_CAP_S,
                                               self.kcfg.heartbeat_interval))


HEADER = ("| backoff | N | mean req/s | peak 1 s | peak 60 s | minute after outage req/s | "
          "ratio to mean | peak 60 s in 30 min after | writes/node-h | requests/node-h | "
          "refused | last agent back (s) | wall (s) | cpu (s) |")


def row(label: str, s: dict, wall: float, cpu: float) -> str:
    return (f"| {label} | {s['n']} | {s['mean']:.2f} | {s['peak_1s']} | {s['peak_60s']:.2f} | "
            f"{s['post_minute']:.2f} | {s['post_ratio']:.2f} | {s['after_peak_60s']:.2f} "
            f"({s['after_peak_60s'] / s['mean']:.2f}x) | {s['writes_per_node_hour']:.1f} | "
            f"{s['requests_per_node_hour']:.1f} | {s['refused']} | {s['last_recovery_s']:.0f} | "
            f"{wall:.0f} | {cpu:.0f} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--agents", default="100,1000,5000")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--compare-old", action="store_true")
    args = ap.parse_args()
    tl = Timeline()
    print(f"simulated: start spread {tl.spread:.0f} s, steady {tl.steady_start:.0f}.."
          f"{tl.steady_end:.0f} s, outage {tl.outage_start:.0f}..{tl.recovery:.0f} s, "
          f"then {tl.after:.0f} s; seed {args.seed}")
    print(HEADER)
    print("|" + "---|" * (HEADER.count("|") - 1))
    new_fail = publish.Publisher._fail
    for n in [int(x) for x in args.agents.split(",")]:
        variants = [("full jitter", new_fail)] + ([("old", old_fail)] if args.compare_old else [])
        for label, fail in variants:
            publish.Publisher._fail = fail  # type: ignore[method-assign]
            t0, c0 = time.perf_counter(), time.process_time()
            stats = simulate(n, tl, args.seed)["stats"]
            print(row(label, stats, time.perf_counter() - t0, time.process_time() - c0),
                  flush=True)
    publish.Publisher._fail = new_fail  # type: ignore[method-assign]


if __name__ == "__main__":
    main()
