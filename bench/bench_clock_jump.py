"""When does the next cycle come after the agent's wall clock steps +1 day and -1 hour?

    python bench/bench_clock_jump.py [--interval 1.0] [--json out.json]

The Daemon runs in this process on the fixture tree with one trivial check, its wall clock
shifted by a shim (agent.daemon.parts.Clock; the machine's clock is never touched). For each
step the figure is the monotonic time from the last cycle before the step to the first one
after it, as a ratio of the configured interval (1.0 = exactly on schedule), beside the same
gap measured with no step in the same run (the reference).
"""
import argparse
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agent.daemon.parts import Clock  # noqa: E402
from agent.model import passed  # noqa: E402
from tests.integration.agentproc import wait_for  # noqa: E402
from tests.reliability.helpers import Running, check, emit_json, make_daemon  # noqa: E402
from tests.reliability.test_clock_faults import ShiftedWall  # noqa: E402


def _gap(interval: float, step_s: float) -> Dict[str, Any]:
    wall = ShiftedWall()
    d = make_daemon([check("fine", lambda h, p: passed("ok"))], fast=interval,
                    clock=Clock(wall=wall, monotonic=time.monotonic))
    with Running(d):
        wait_for(lambda: len(d.cycle_log) >= 3, 60, "cycles")
        last_mono, _ = d.cycle_log[-1]
        count = len(d.cycle_log)
        time.sleep(interval / 2)  # the step lands between two cycles
        wall.step(step_s)
        wait_for(lambda: len(d.cycle_log) >= count + 2, 60 + 3 * interval, "cycles after")
        cycles: List[Any] = list(d.cycle_log)[count - 1:]
    first = cycles[1][0] - last_mono
    second = cycles[2][0] - cycles[1][0]
    return {"step_s": step_s, "next_cycle_after_s": first, "ratio_to_interval": first / interval,
            "following_gap_s": second,
            "wall_stamp_moved_s": cycles[1][1] - cycles[0][1] - (cycles[1][0] - cycles[0][0])}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--json")
    args = ap.parse_args()
    result = {"interval_s": args.interval,
              "reference": _gap(args.interval, 0.0),
              "plus_1_day": _gap(args.interval, 86400.0),
              "minus_1_hour": _gap(args.interval, -3600.0)}
    emit_json(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
