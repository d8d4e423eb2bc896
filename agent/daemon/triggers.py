"""Event-driven verdicts: a GPU event (an XID from the kernel log or NVML, a failed NVML event
wait such as GPU-lost) re-evaluates the checks it concerns at once instead of at the next
fast cycle (up to ``run.fast_interval``, 60 s by default), coalesced and rate-limited.

- Which checks an event concerns: the ones the fast cycle runs that read the GPUs or the
  sticky fault store (``concerns``: ``uses_gpus`` and the fast interval: gpu-xid, gpu-ecc,
  nvml-responsive, gpu-count, allocation-owner, gpu-row-remap, gpu-thermal in the registry
  today). Slow and bootstrap-only checks (configs, the workload container) never run on an
  event.
- Coalescing: events that arrive while an evaluation is pending join it (one evaluation for
  a burst); an event-driven evaluation or a scheduled fast cycle that starts after the event
  was noted covers it.
- Rate limit: evaluations start at least ``MIN_GAP_S`` apart, so an XID storm costs at most
  one evaluation per second on top of the schedule; the scheduled cycles keep their times.
- Event-driven Reports carry ``trigger="event"``: they close a gate at once but never count
  toward the consecutive open runs that set the allocation label (agent/report.py).

The kernel log is read between cycles by ``KernelLogWatch``: it waits in poll(2) on the
/dev/kmsg descriptor (the device signals POLLIN when a record arrives: kernel
Documentation/ABI/testing/dev-kmsg; kernel/printk/printk.c devkmsg_poll) and lets the XID
monitor drain it, at most every ``DRAIN_GAP_S``. The journal fallback has no descriptor to
wait on; there the kernel log is read by the cycles alone (NVML events still trigger).
"""
import logging
import select
import threading
import time
from typing import Any, Callable, Iterable, List, Optional, Sequence

from agent.logs import log
from agent.model import Check, Interval

MIN_GAP_S = 1.0  # at most one event-driven evaluation per second
DRAIN_GAP_S = 0.1  # the kernel-log watcher drains at most ten times a second
WATCH_WAIT_S = 1.0  # how long the watcher waits in poll(2) before it looks at the stop flag
MAX_FAILURES = 10  # consecutive failed drains before the watcher leaves it to the cycles


def concerns(check: Check) -> bool:
    """True when a GPU event can change this check's verdict (and it is cheap to re-run)."""
    return check.uses_gpus and check.interval == Interval.FAST


def concerned_ids(checks: Iterable[Check]) -> List[str]:
    return [c.id for c in checks if concerns(c)]


class EventTrigger:
    """Coalesces event notices (any thread) into evaluations the scheduler runs, at most
    one per ``min_gap_s`` of the injected monotonic clock. Pure apart from its lock."""

    def __init__(self, monotonic: Callable[[], float], min_gap_s: float = MIN_GAP_S) -> None:
        self.monotonic = monotonic
        self.min_gap_s = min_gap_s
        self._lock = threading.Lock()
        self._pending_since: Optional[float] = None
        self._last_start: Optional[float] = None
        self.notices = 0  # events noted
        self.evaluations = 0  # event-driven evaluations started
        self.covered = 0  # pending events a scheduled fast cycle took care of

    def notify(self) -> bool:
        """Note an event; True when it made an evaluation pending (later ones join it)."""
        with self._lock:
            self.notices += 1
            if self._pending_since is None:
                self._pending_since = self.monotonic()
                return True
            return False

    def pending(self) -> bool:
        with self._lock:
            return self._pending_since is not None

    def due_at(self) -> Optional[float]:
        """When the pending evaluation may start (None: nothing pending)."""
        with self._lock:
            return self._due_locked()

    def _due_locked(self) -> Optional[float]:
        if self._pending_since is None:
            return None
        if self._last_start is None:
            return self._pending_since
        return max(self._pending_since, self._last_start + self.min_gap_s)

    def take(self, now: float) -> bool:
        """True (and the pending events consumed) when an evaluation should start now."""
        with self._lock:
            due = self._due_locked()
            if due is None or due > now:
                return False
            self._pending_since, self._last_start = None, now
            self.evaluations += 1
            return True

    def cover(self, started: float) -> None:
        """A scheduled fast cycle started at ``started`` (it runs every concerned check, and
        reads the kernel log first): events noted up to then need no evaluation of their own."""
        with self._lock:
            if self._pending_since is not None and self._pending_since <= started:
                self._pending_since = None
                self.covered += 1


class KernelLogWatch:
    """A thread that waits for kernel-log records and has the XID monitor drain them, so an
    XID reaches the monitor (and its ``on_event``) when written, not at the next cycle."""

    def __init__(self, fd: int, drain: Callable[[], object], stopping: Callable[[], bool],
                 logger: logging.Logger) -> None:
        self.fd = fd
        self.drain = drain
        self.stopping = stopping
        self.log = logger
        self.drains = 0
        self.failures = 0  # consecutive failed drains
        self.thread = threading.Thread(target=self._run, name="kmsg-watch", daemon=True)

    def start(self) -> "KernelLogWatch":
        self.thread.start()
        return self

    def alive(self) -> bool:
        return self.thread.is_alive()

    def _run(self) -> None:
        poller = select.poll()
        poller.register(self.fd, select.POLLIN | select.POLLPRI)
        while not self.stopping():
            try:
                ready = poller.poll(int(WATCH_WAIT_S * 1000))
            except InterruptedError:
                continue
            if not ready:
                continue
            mask = ready[0][1]
            if mask & select.POLLNVAL or self.stopping():  # closed at stop: nothing to drain
                return
            try:
                self.drain()
                self.drains, self.failures = self.drains + 1, 0
            except Exception as exc:  # the cycle's own poll still reads what is left
                self.failures += 1
                log(self.log, logging.ERROR, "kernel-log drain failed", failures=self.failures,
                    error=f"{type(exc).__name__}: {exc}")
                if self.failures >= MAX_FAILURES:  # the cycles read the kernel log alone
                    return
            # POLLHUP without POLLIN (a stand-in FIFO whose writer left) stays ready, as does
            # a device whose read fails: wait the full period so neither can spin; otherwise
            # the drain gap bounds the rate.
            hang_up = mask & (select.POLLHUP | select.POLLERR) and not mask & select.POLLIN
            time.sleep(WATCH_WAIT_S if hang_up or self.failures else DRAIN_GAP_S)


class EventHooks:
    """The Daemon's side of event-driven verdicts (agent/daemon/service.py); the attributes
    below are the Daemon's own."""

    gen: Any
    log: logging.Logger
    clock: Any  # agent.daemon.parts.Clock
    checks: List[Check]
    wake: Any  # agent.daemon.parts.Waker
    stop_event: threading.Event
    xid_monitor: Any

    def run_cycle(self, intervals: Sequence[Interval], trigger: str = "schedule") -> Any:
        raise NotImplementedError  # the Daemon's

    def _event_driven(self) -> bool:
        return bool(getattr(self.gen.config.run, "event_driven", True))

    def _hook_events(self) -> None:
        self.events = EventTrigger(self.clock.monotonic)
        self._event_ids = concerned_ids(self.checks)
        self._kwatch: Optional[KernelLogWatch] = None
        self._read_at = 0.0  # when the last cycle began reading the XID sources
        if self.xid_monitor is not None and hasattr(self.xid_monitor, "on_sticky"):
            self.xid_monitor.on_sticky = self.urgent_cycle
        if self.xid_monitor is not None and hasattr(self.xid_monitor, "on_event"):
            self.xid_monitor.on_event = self.event_seen

    def urgent_cycle(self) -> None:
        raise NotImplementedError  # agent/daemon/process.py

    def _urgent_due(self, fast_due: Optional[float]) -> Optional[float]:
        """A new sticky fault (``urgent_cycle``): with event_driven an event (rate-limited,
        the concerned checks only), without it the whole fast cycle now, as before."""
        if not self._event_driven():
            return 0.0
        self.events.notify()
        return fast_due

    def _guarded(self, intervals: Sequence[Interval], trigger: str) -> None:
        """One cycle that never ends the agent; then the events it covered are settled."""
        try:
            self.run_cycle(intervals, trigger)
        except Exception as exc:
            log(self.log, logging.ERROR, "check cycle failed",
                error=f"{type(exc).__name__}: {exc}")
        if trigger == "event" or Interval.FAST in intervals:  # every concerned check ran
            self.events.cover(self._read_at)

    def event_seen(self) -> None:
        """A GPU event (any thread): evaluate the checks it concerns soon (run.event_driven)."""
        # Only an event that made an evaluation pending wakes the loop: later ones join it and
        # leave its time as it was, so waking for each of an XID storm would only spin the loop.
        if self._event_driven() and self.events.notify():
            self.wake.set()

    def _watch_kernel(self) -> None:
        """Start the kernel-log watcher (again, if it ended) while event-driven and the
        kernel log is a device; it ends by itself when a reload turns event_driven off."""
        if self._kwatch is not None and (
                self._kwatch.alive() or self._kwatch.failures >= MAX_FAILURES):
            return  # running, or gave up: the cycles read the kernel log (not again each tick)
        fd = getattr(self.xid_monitor, "kernel_fd", lambda: -1)()
        if fd < 0 or not self._event_driven():
            return
        self._kwatch = KernelLogWatch(
            fd, self.xid_monitor.poll,
            lambda: self.stop_event.is_set() or not self._event_driven(), self.log).start()
