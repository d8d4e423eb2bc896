"""The process around the scheduler: signals, the systemd watchdog, supervised threads, and
the orderly stop. Daemon (agent/daemon/service.py) is the scheduler; this is its shell.

The main thread only waits for signals (SIGTERM/SIGINT stop, SIGHUP reloads) and looks at its
workers; the watchdog pings systemd only while the main loop makes progress and the metrics
endpoint's threads are alive (sd_notify(3) WATCHDOG=1: a ping proves the service works, not
that the process exists).
"""
import logging
import signal
import threading
from typing import Any, Callable, Dict, List, Optional

from agent.daemon.parts import Clock, OutputPump, Supervised, Waker, close_all
from agent.daemon.sdnotify import Notifier
from agent.logs import log

EXIT_WORKER_DIED = 70  # EX_SOFTWARE (sysexits.h): a worker thread kept dying; systemd restarts us
SUPERVISE_S = 1.0  # how often the main thread looks at its workers


class ProcessShell:
    """Signals, watchdog, supervision and stop for the Daemon (the attributes below are the
    Daemon's own)."""

    log: logging.Logger
    clock: Clock
    notifier: Notifier
    restart_backoff_s: float
    stop_event: threading.Event
    wake: Waker
    _main_wake: Waker
    _watch_wake: Waker
    reload_event: threading.Event
    _urgent: bool
    _signals: Dict[int, bool]
    _workers: List[Supervised]
    _pump: OutputPump
    exit_code: int
    xid_monitor: Any
    source: Any
    server: Any  # agent.outputs.metrics_server.MetricsServer
    listen: str
    gen: Any

    def loop(self) -> None:  # the Daemon's scheduler
        raise NotImplementedError

    def making_progress(self) -> bool:
        raise NotImplementedError

    def _close_outputs(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        self.stop_event.set()
        for waker in (self.wake, self._main_wake, self._watch_wake):
            waker.set()

    def request_reload(self) -> None:
        self.reload_event.set()
        self.wake.set()

    def urgent_cycle(self) -> None:
        """A sticky GPU fault arrived (the XID monitor's callback, any thread): run the fast
        checks now, so the gate closes at once rather than at the next interval."""
        self._urgent = True
        self.wake.set()

    def _on_signal(self, signum: int, frame: Any) -> None:
        # Only a flag (and the wakeup fd's byte, written in C): no lock, no logging, no call
        # that could nest under the next signal (signal(7) async-signal-safety; Python runs
        # this between bytecodes of the main thread, so a burst of 3,000 must cost nothing).
        self._signals[signum] = True

    def _take_signals(self) -> None:
        if self._signals.pop(signal.SIGTERM, False) | self._signals.pop(signal.SIGINT, False):
            self.stop()
        if self._signals.pop(signal.SIGHUP, False):
            self.request_reload()

    def _watchdog(self, period: float) -> None:
        while not self.stop_event.is_set():
            self._watch_wake.wait(period / 2)
            if self.stop_event.is_set():
                return
            if self.making_progress() and self.server.alive():
                self.notifier.watchdog()

    def _supervise(self) -> None:
        """Restart a dead worker with backoff; exit non-zero when one keeps dying or the
        endpoint's threads are gone (a process without them is a zombie endpoint)."""
        stopping = self.stop_event.is_set()
        for worker in self._workers:
            if not worker.check(stopping):
                self._give_up(f"{worker.name} thread died {len(worker.deaths)} times",
                              worker.last_error)
                return
        if not stopping and not self.server.alive():
            self._give_up("metrics endpoint thread died", "")

    def _give_up(self, why: str, error: str) -> None:
        log(self.log, logging.CRITICAL, "exiting so systemd restarts the agent", reason=why,
            error=error[:300])
        self.exit_code = EXIT_WORKER_DIED
        self.stop()

    def _supervised(self, name: str, target: Callable[[], None]) -> Supervised:
        return Supervised(name, target, self.log, self.clock, self._main_wake.set,
                          backoff_s=self.restart_backoff_s)

    def serve(self, install_signals: bool = True, stop_timeout_s: float = 4.0) -> int:
        """Run until SIGTERM/SIGINT (or stop_event); the process exit code."""
        previous: Dict[Any, Any] = {}
        old_wakeup = -1
        if install_signals:
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                previous[sig] = signal.signal(sig, self._on_signal)
            old_wakeup = signal.set_wakeup_fd(self._main_wake.fd, warn_on_full_buffer=False)
        try:
            self._serve_until_stopped()
        finally:
            if install_signals:
                signal.set_wakeup_fd(old_wakeup)
                for sig, handler in previous.items():
                    signal.signal(sig, handler)
        self.notifier.stopping()
        log(self.log, logging.INFO, "stopping")
        loop: Optional[threading.Thread] = self._workers[0].thread if self._workers else None
        if loop is not None:
            loop.join(stop_timeout_s / 2)  # mid-cycle it may be waiting on a deadline
        self._close_outputs()  # the endpoint (stops the server) and the textfile
        self._pump.stop()
        close_all(self._pump.outputs)
        stopper = getattr(self.xid_monitor, "stop", None)
        if stopper is not None:  # ends the NVML event worker and the kernel-log reader
            stopper()
        closer = getattr(self.source.gpus, "close", None)
        if closer is not None:  # kills the NVML worker; bounded, it may hold a lock
            t = threading.Thread(target=closer, name="nvml-close", daemon=True)
            t.start()
            t.join(stop_timeout_s / 2)
        return self.exit_code

    def _serve_until_stopped(self) -> None:
        self.server.start()
        log(self.log, logging.INFO, "listening", address=self.listen, port=self.server.port,
            tls=bool(self.gen.web and self.gen.web.ssl_context),
            basic_auth=bool(self.gen.web and self.gen.web.auth_required))
        self._workers = [self._supervised("main-loop", self.loop),
                         self._supervised("outputs", self._pump._run)]
        watchdog_s = self.notifier.watchdog_s
        if watchdog_s:
            self._workers.append(self._supervised("watchdog", lambda: self._watchdog(watchdog_s)))
        for worker in self._workers:
            worker.start()
        while not self.stop_event.is_set():
            self._main_wake.wait(SUPERVISE_S)  # a signal writes to its pipe and ends the wait
            self._main_wake.clear()
            self._take_signals()
            self._supervise()
