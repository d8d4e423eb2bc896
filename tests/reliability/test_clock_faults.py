"""Fault matrix, clock rows: the agent's wall clock steps forward a day, then back an hour,
through a shim for this agent only (agent.daemon.parts.Clock injected into the Daemon; the
machine's clock is never touched). The next cycle must come on the monotonic schedule, and
only the timestamps written out may move with the wall clock."""
import contextlib
import threading
import time

import pytest

from agent.daemon.parts import Clock, Supervised
from agent.logs import setup
from agent.model import passed
from tests.integration.agentproc import wait_for
from tests.reliability.helpers import Running, check, make_daemon

FAST = 0.3  # fast_interval, seconds
# A cycle is due FAST after the previous one started; the loop wakes at least every TICK_S.
# The bound is loose for a loaded CI machine; a wall-clock schedule would miss it by an hour
# (back) or run at once and keep the wrong timestamps (forward).
ON_SCHEDULE_S = FAST + 5.0


class ShiftedWall:
    """time.time() plus an offset the test changes: the agent's wall clock alone."""

    def __init__(self) -> None:
        self.offset = 0.0
        self.lock = threading.Lock()

    def __call__(self) -> float:
        with self.lock:
            return time.time() + self.offset

    def step(self, seconds: float) -> None:
        with self.lock:
            self.offset += seconds


def _cycles_after(d, t):
    return [(m, w) for m, w in list(d.cycle_log) if m > t]


@pytest.mark.parametrize("step_s, name", [(86400.0, "+1 day"), (-3600.0, "-1 hour")])
def test_a_wall_clock_step_keeps_the_cycle_schedule(step_s, name):
    """Rows "clock jump +1 day" and "clock jump -1 h": after the step the next cycle starts
    within FAST (+ slack) of the previous one on the monotonic clock, later cycles keep the
    FAST period, and last_success (written out) follows the stepped wall clock."""
    wall = ShiftedWall()
    d = make_daemon([check("fine", lambda h, p: passed("ok"))], fast=FAST,
                    clock=Clock(wall=wall, monotonic=time.monotonic))
    with Running(d):
        wait_for(lambda: len(d.cycle_log) >= 3, 20, "three cycles before the step")
        last_before = d.cycle_log[-1][0]
        stepped_at = time.monotonic()
        wall.step(step_s)
        wait_for(lambda: len(_cycles_after(d, stepped_at)) >= 3, 20, "three cycles after")
        after = _cycles_after(d, stepped_at)
        first_gap = after[0][0] - last_before
        assert first_gap <= ON_SCHEDULE_S, f"{name}: next cycle {first_gap:.1f}s after the last"
        gaps = [b[0] - a[0] for a, b in zip(after, after[1:])]
        assert all(FAST * 0.9 <= g <= ON_SCHEDULE_S for g in gaps), gaps
        # the shim reached the agent: what it writes out moved with its wall clock
        assert abs(after[-1][1] - time.time() - step_s) < 60
        wait_for(lambda: d.last_success is not None
                 and abs(d.last_success - time.time() - step_s) < 60, 10, "stepped timestamp")


@pytest.mark.parametrize("step_s", [86400.0, -3600.0])
def test_the_watchdog_keeps_pinging_across_a_wall_clock_step(tmp_path, step_s):
    """The systemd watchdog (fed only while the loop progresses) is on the monotonic clock: a
    step of a day forward or an hour back neither makes the loop look stalled nor silences
    the pings."""
    import socket

    from agent.daemon.sdnotify import Notifier

    path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(0.2)
    wall = ShiftedWall()
    d = make_daemon([check("fine", lambda h, p: passed("ok"))], fast=FAST,
                    clock=Clock(wall=wall, monotonic=time.monotonic))
    d.notifier = Notifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "400000"})
    try:
        with Running(d):
            wait_for(lambda: d.ready, 20, "ready")
            wall.step(step_s)
            pings = 0
            end = time.monotonic() + 2.0
            while time.monotonic() < end:
                with contextlib.suppress(socket.timeout):
                    pings += sock.recv(4096) == b"WATCHDOG=1"
            assert pings >= 2 and d.making_progress()
    finally:
        sock.close()


def test_restart_backoff_is_on_the_monotonic_clock():
    """A dead worker's restart is due on the monotonic clock: stepping the wall clock does not
    bring it forward or push it back (here the monotonic clock is the test's own)."""
    mono = [100.0]
    clock = Clock(wall=lambda: 5e9, monotonic=lambda: mono[0])
    runs = []

    def dies():
        runs.append(mono[0])
        raise RuntimeError("injected")

    worker = Supervised("w", dies, setup(), clock, lambda: None, backoff_s=1.0)
    worker.start()
    worker.thread.join(5)
    assert worker.check(False) and worker.restart_at == 101.0  # first death: 1 s
    clock.wall = lambda: 0.0  # a wall step changes nothing
    assert worker.check(False) and runs == [100.0]
    mono[0] = 101.0
    assert worker.check(False)
    worker.thread.join(5)
    assert runs == [100.0, 101.0]
    assert worker.check(False) and worker.restart_at == 103.0  # second death: 2 s
