"""Small pieces of `run` kept apart from the scheduler (agent/daemon/service.py)."""
import contextlib
import logging
import os
import select
import threading
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, cast

from agent.logs import log
from agent.model import CheckResult
from agent.outputs.base import Output
from agent.report import Report


class Clock:
    """The daemon's two clocks, injectable so tests can step the wall clock of the agent alone
    (never the machine's). ``monotonic`` schedules everything (cycles, heartbeats, backoff,
    rate limits, the watchdog); ``wall`` only stamps what is written out (report time, last
    success, the textfile). A wall-clock step (NTP, an operator's `date -s`) therefore
    changes timestamps and nothing else (clock_gettime(2): CLOCK_MONOTONIC "is not affected
    by discontinuous jumps in the system time")."""

    def __init__(self, wall: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.wall = wall
        self.monotonic = monotonic


class Waker:
    """An event whose timed wait does not follow the wall clock on any Python: a pipe and
    poll(2), whose timeout is relative. threading.Event.wait(timeout) waits on an absolute
    CLOCK_REALTIME deadline (sem_timedwait) unless the interpreter was built with
    sem_clockwait (glibc >= 2.30, CPython 3.11 and some 3.9/3.10 patch releases:
    python/cpython#85876), so there a clock stepped back an hour makes a 5 s wait an hour.
    ``fd`` can also be handed to signal.set_wakeup_fd so a signal ends the wait."""

    def __init__(self) -> None:
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)
        self._flag = False

    @property
    def fd(self) -> int:
        return self._w

    def set(self) -> None:
        self._flag = True
        with contextlib.suppress(OSError):  # a full pipe already wakes the waiter
            os.write(self._w, b"\0")

    def is_set(self) -> bool:
        return self._flag

    def wait(self, timeout: float) -> bool:
        """Until set() (or a signal, via set_wakeup_fd) or ``timeout`` seconds pass."""
        if not self._flag:
            poller = select.poll()  # one per call: a poll object is not shared between threads
            poller.register(self._r, select.POLLIN)
            poller.poll(max(0, int(timeout * 1000)))
        return self._flag

    def clear(self) -> None:
        self._flag = False
        with contextlib.suppress(OSError):
            while os.read(self._r, 4096):
                pass

    def close(self) -> None:
        for fd in (self._r, self._w):
            with contextlib.suppress(OSError):
                os.close(fd)


class Supervised:
    """A worker thread the daemon restarts when it dies: with backoff (1, 2, 4 ... 60 s), and
    at most MAX_DEATHS deaths in DEATH_WINDOW_S before the daemon gives up and exits non-zero
    for systemd's Restart=on-failure (a process that stays up with a dead scheduler would
    serve stale metrics forever)."""

    MAX_DEATHS = 5
    DEATH_WINDOW_S = 600.0
    BACKOFF_MAX_S = 60.0

    def __init__(self, name: str, target: Callable[[], None], logger: logging.Logger,
                 clock: Clock, on_death: Callable[[], None], backoff_s: float = 1.0) -> None:
        self.name = name
        self.backoff_s = backoff_s
        self.target = target
        self.log = logger
        self.clock = clock
        self.on_death = on_death
        self.deaths: List[float] = []
        self.restart_at: Optional[float] = None
        self.thread: Optional[threading.Thread] = None
        self.last_error = ""

    def start(self) -> None:
        self.thread = threading.Thread(target=self._body, name=self.name, daemon=True)
        self.thread.start()

    def _body(self) -> None:
        try:
            self.target()
        except BaseException as exc:  # noqa: B036 - a thread's death must be logged, not lost
            self.last_error = f"{type(exc).__name__}: {exc}"
            log(self.log, logging.ERROR, "worker thread died", thread=self.name,
                error=self.last_error[:300])
            self.on_death()

    def dead(self) -> bool:
        return self.thread is not None and not self.thread.is_alive()

    def check(self, stopping: bool) -> bool:
        """Restart if dead and due; False when it died too often (the caller exits)."""
        if stopping or not self.dead():
            return True
        now = self.clock.monotonic()
        if self.restart_at is None:
            self.deaths = [t for t in self.deaths if now - t < self.DEATH_WINDOW_S] + [now]
            if len(self.deaths) >= self.MAX_DEATHS:
                return False
            delay = min(self.BACKOFF_MAX_S, self.backoff_s * 2.0 ** (len(self.deaths) - 1))
            self.restart_at = now + delay
            log(self.log, logging.WARNING, "restarting worker thread", thread=self.name,
                deaths=len(self.deaths), delay_s=delay)
        if now >= self.restart_at:
            self.restart_at = None
            self.start()
        return True

    def next_due(self) -> Optional[float]:
        return self.restart_at


class OutputPump:
    """Hands the newest Report to each output in its own thread, dropping stale ones. The
    daemon runs ``_run`` as a supervised thread (restarted if it dies), always, so outputs a
    reload adds are served too."""

    def __init__(self, outputs: Sequence[Output], logger: logging.Logger) -> None:
        self.outputs = list(outputs)
        self.log = logger
        self._cond = threading.Condition()
        self._pending: Optional[Report] = None
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="outputs", daemon=True)

    def start(self) -> None:
        if self.outputs:
            self._thread.start()

    def offer(self, report: Report) -> None:
        with self._cond:
            self._pending = report
            self._cond.notify()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._pending is None and not self._stopped:
                    self._cond.wait()
                if self._stopped:
                    return
                # not None: the wait ends with a Report pending, or stopped (returned above)
                report, self._pending = cast(Report, self._pending), None
            for out in self.outputs:
                try:
                    out.publish(report)
                except Exception as exc:  # an output failing must not stop the others
                    log(self.log, logging.ERROR, "output failed", output=type(out).__name__,
                        error=f"{type(exc).__name__}: {exc}")


def xid_counts(report: Optional[Report]) -> Dict[Tuple[str, str], int]:
    """Per-(GPU, XID) counts since boot, from the gpu-xid check's ``xid_counts`` details
    ({"<gpu>:<code>": n}, checks/xid/gpu_xid.py). <gpu> is the NVML index; a kernel-log line
    that could not be mapped to one keeps its PCI id (still one series per device)."""
    return xid_counts_of(report.result("gpu-xid") if report is not None else None)


def xid_counts_of(result: Optional[CheckResult]) -> Dict[Tuple[str, str], int]:
    """The counts in one gpu-xid result (None: none ran)."""
    raw = result.details.get("xid_counts") if result is not None else None
    out: Dict[Tuple[str, str], int] = {}
    if isinstance(raw, Mapping):
        for key, n in raw.items():
            gpu, sep, code = str(key).rpartition(":")
            if sep and code.isdigit() and isinstance(n, int):
                out[(gpu, code)] = n
    return out


def verdict_line(report: Report) -> str:
    counts: Dict[str, int] = {}
    for r in report.results:
        counts[str(r.status)] = counts.get(str(r.status), 0) + 1
    tally = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    if report.gate.open:
        return f"gate {report.path} open; {tally}"
    return f"gate {report.path} CLOSED by {','.join(report.gate.blocking)}; {tally}"


def malloc_trim() -> None:
    """Give freed heap back to the kernel (glibc malloc_trim(3)); a cycle's large buffers
    (command output, the NVML snapshot's JSON) otherwise stay resident until reused."""
    try:
        import ctypes

        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc (musl): nothing to do
        pass


def close_all(outputs: Any) -> None:
    for out in list(outputs):
        closer = getattr(out, "close", None)
        if closer is not None:
            with contextlib.suppress(Exception):
                closer()
