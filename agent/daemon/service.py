"""`gpu-node-agent run`: the scheduler, signals, sd_notify and the metrics endpoint.

Threads: the main thread only waits for signals (SIGTERM/SIGINT stop, SIGHUP reloads); the
scheduler thread ("main loop") runs due checks through the Engine, which gives each check its
own thread and deadline and never restarts one still running, so a hanging check costs one
thread and reports `unknown` while the rest go on; the HTTP server serves bytes rendered once
per Report; the watchdog thread pings systemd only while the main loop makes progress; the
output pump hands each Report to the Node outputs, so an API outage never stalls checks or
metrics. The daemon never imports the check registry: the command line passes the checks and
a loader that validates the config (so a reload validates exactly like a start).
"""
import contextlib
import gc
import logging
import os
import signal
import threading
from collections import deque
from dataclasses import dataclass
from typing import (
    Any,
    Callable,
    Deque,
    Dict,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Set,
    Tuple,
)

from agent.daemon.parts import (
    Clock,
    OutputPump,
    Supervised,
    Waker,
    close_all,
    malloc_trim,
    nvidia_majors,
    verdict_line,
    xid_counts,
)
from agent.daemon.sdnotify import Notifier
from agent.engine import Engine, order_checks
from agent.logs import log
from agent.model import Check, CheckResult, Interval, Status
from agent.outputs import metrics
from agent.outputs.metrics_server import MetricsServer
from agent.outputs.webconfig import WebConfig, load_web_config
from agent.report import Report, build_report
from agent.safeio.bounded import read_text_capped

EXIT_DRIVER_CHANGED = 75  # EX_TEMPFAIL: Restart=on-failure brings the unit back
EXIT_WORKER_DIED = 70  # EX_SOFTWARE (sysexits.h): a worker thread kept dying; systemd restarts us
SUPERVISE_S = 1.0  # how often the main thread looks at its workers
TICK_S = 5.0  # the loop also wakes at once for SIGHUP/SIGTERM and when a cycle is due
DRIVER_POLL_S = 5.0
SNAPSHOT_WAIT_S = 5.0


@dataclass
class Generation:
    """One validated configuration: what the loader returns, what SIGHUP replaces."""

    config: Any  # agent.config.Config
    origin: Optional[str]
    policy: Any  # checks.policy.ResolvedPolicy
    path: str
    skip: List[str]
    strict: bool = False
    web: Optional[WebConfig] = None


@dataclass
class Source:
    """Where the host comes from; fixed for the life of the process."""

    host_root: Optional[str] = None
    bundle: Optional[str] = None
    gpus: Any = None  # a long-lived GpuSource (NvmlClient) or None
    # gen -> context manager yielding the cycle's Host, from the command line
    # (agent/cli_run.py host_opener: it puts the API facts in front of a live Host)
    opener: Any = None


class Daemon:
    def __init__(
        self,
        checks: Sequence[Check],
        loader: Callable[[], Generation],
        source: Source,
        version: str,
        logger: logging.Logger,
        notifier: Optional[Notifier] = None,
        outputs: Sequence[Any] = (),
        outputs_factory: Optional[Callable[[Generation], Sequence[Any]]] = None,
        xid_monitor: Any = None,
        listen_override: Optional[str] = None,
        stall_margin_s: float = 30.0,
        clock: Optional[Clock] = None,
        restart_backoff_s: float = 1.0,
    ) -> None:
        self.clock = clock or Clock()
        self.restart_backoff_s = restart_backoff_s
        self.checks = list(checks)
        self.loader = loader
        self.source = source
        self.version = version
        self.log = logger
        self.notifier = notifier or Notifier()
        self.outputs_factory = outputs_factory
        self.xid_monitor = xid_monitor  # agent.xid.monitor.XidMonitor on a live host
        self._fixed_outputs = list(outputs)
        self.engine = Engine(self.checks)
        self.gen = loader()
        self.gen.web = self._load_web(self.gen.config)
        self.listen = listen_override or self.gen.config.run.listen_address
        self.stop_event = threading.Event()  # is_set() only: waits go through Wakers
        self.wake = Waker()  # interrupts the loop's wait (reload, stop(), an urgent fault)
        self._main_wake = Waker()  # the main thread's: signals (set_wakeup_fd), stop()
        self._watch_wake = Waker()  # the watchdog's: stop()
        self.reload_event = threading.Event()
        self._urgent = False  # a sticky fault arrived: run the fast checks now
        self._signals: Dict[int, bool] = {}
        self._workers: List[Supervised] = []
        # (monotonic, wall) at the start of each recent cycle: what the clock tests look at
        self.cycle_log: Deque[Tuple[float, float]] = deque(maxlen=256)
        self.exit_code = 0
        self.results: Dict[str, CheckResult] = {}
        self.last_run: Dict[str, float] = {}
        self.report: Optional[Report] = None
        self.snapshot: Optional[Mapping[str, Any]] = None
        self.last_success: Optional[float] = None
        self.cycle_duration: Optional[float] = None
        self.reload_ok = True
        self.start_time = self.clock.wall()
        self.ready = False
        # Progress, for the watchdog: the loop beats every tick; inside a cycle it is making
        # progress until the engine's own worst case (every wave's slowest deadline) passes.
        self.heartbeat = self.clock.monotonic()
        self.cycle_started: Optional[float] = None
        waves = order_checks(self.checks)
        self.cycle_bound = sum(max(c.timeout_s for c in w) for w in waves) + stall_margin_s
        self.stall_margin_s = stall_margin_s
        self._snap_thread: Optional[threading.Thread] = None
        self._majors: Optional[Set[Tuple[int, str]]] = None
        self._next_driver_poll = 0.0
        made = list(outputs_factory(self.gen)) if outputs_factory else []
        self._pump = OutputPump(self._fixed_outputs + made, logger)
        self.server = MetricsServer(self.listen, self.gen.web, self._render())
        if xid_monitor is not None and hasattr(xid_monitor, "on_sticky"):
            xid_monitor.on_sticky = self.urgent_cycle

    # -- configuration -------------------------------------------------------------------
    def _load_web(self, config: Any) -> Optional[WebConfig]:
        path = config.run.web_config_file
        return load_web_config(path) if path else None

    def _reload(self) -> None:
        try:
            gen = self.loader()
            gen.web = self._load_web(gen.config)
        except Exception as exc:  # ConfigError, WebConfigError, UsageError: all one line
            self.reload_ok = False
            log(self.log, logging.ERROR, "config reload failed; keeping the previous config",
                error=str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
            return
        if gen.config.run.listen_address != self.gen.config.run.listen_address:
            log(self.log, logging.WARNING, "listen_address changes need a restart; kept",
                listen=self.listen)
        self.gen, self.reload_ok = gen, True
        self.server.set_web_config(gen.web)
        if self.outputs_factory is not None:  # the Node outputs follow the new kube/nfd config
            old = self._pump.outputs
            self._pump.outputs = self._fixed_outputs + list(self.outputs_factory(gen))
            close_all(o for o in old if o not in self._fixed_outputs)
        log(self.log, logging.INFO, "config reloaded", origin=gen.origin or "built-in defaults",
            path=gen.path)

    # -- the host ------------------------------------------------------------------------
    @contextlib.contextmanager
    def _open_host(self) -> Iterator[Any]:
        from agent.host.build import live_host, open_host, tree_host

        src = self.source
        if src.opener is not None:
            with src.opener(self.gen) as host:
                yield self._with_sticky(host)
        elif src.bundle is not None:
            with open_host(bundle=src.bundle) as host:
                yield self._with_sticky(host)
        elif src.host_root is not None:
            yield self._with_sticky(tree_host(src.host_root, gpus=src.gpus))
        else:
            yield self._with_sticky(live_host(self.gen.config, gpus=src.gpus))

    def _with_sticky(self, host: Any) -> Any:
        return host if self.xid_monitor is None else _StickyFromMemory(host, self.xid_monitor)

    def _take_snapshot(self, host: Any, results: Sequence[CheckResult]) -> Any:
        """The GPU snapshot the GPU checks of this cycle saw (cached per Host), so metrics
        never cost an NVML call of their own. No GPU check ran: keep the previous one. A GPU
        check timed out: it is still inside host.gpus(), so asking again would block too;
        report NVML as timed out (no GPU series, nvml_up 0), as the NVML client does."""
        gpu_ids = {c.id for c in self.checks if c.uses_gpus}
        ran = [r for r in results if r.id in gpu_ids and r.status != Status.SKIP]
        if not ran:
            return self.snapshot
        if any(r.details.get("timed_out") for r in ran):
            return {"schema_version": 1, "gpus": [],
                    "error": {"kind": "timeout", "message": "a GPU check timed out"}}
        if self._snap_thread is not None and self._snap_thread.is_alive():
            return self.snapshot
        box: Dict[str, Any] = {}
        self._snap_thread = threading.Thread(
            target=lambda: box.update(snap=host.gpus()), name="gpu-snapshot", daemon=True
        )
        self._snap_thread.start()
        self._snap_thread.join(SNAPSHOT_WAIT_S)  # cached: instant unless something is wrong
        return box.get("snap") if "snap" in box else self.snapshot

    # -- one cycle -----------------------------------------------------------------------
    def run_cycle(self, intervals: Sequence[Interval]) -> Report:
        gen = self.gen
        ids = [c.id for c in self.checks if c.interval in intervals]
        started = self.clock.monotonic()
        self.cycle_started = started
        self.cycle_log.append((started, self.clock.wall()))
        if self.xid_monitor is not None:  # sticky faults first: the checks read them
            try:
                self.xid_monitor.cycle(self.snapshot)
            except Exception as exc:
                log(self.log, logging.ERROR, "XID monitor failed",
                    error=f"{type(exc).__name__}: {exc}")
        try:
            with self._open_host() as host:
                results = self.engine.run(host, gen.policy, only=ids, skip=gen.skip)
                self.snapshot = self._take_snapshot(host, results)
                description = host.description
        finally:
            self.cycle_started = None
        now = self.clock.wall()  # a timestamp written out, never a schedule
        for r in results:
            self.results[r.id] = r
            self.last_run[r.id] = now
        ordered = [self.results[c.id] for c in self.checks if c.id in self.results]
        previous = self.report
        self.report = build_report(ordered, gen.path, gen.strict, description, now, self.version)
        self.last_success = now
        self.cycle_duration = self.clock.monotonic() - started
        self._publish(previous)
        return self.report

    def _render(self) -> bytes:
        src = self.source.gpus
        return metrics.render(metrics.MetricsInput(
            checks=self.checks, version=self.version, path=self.gen.path, report=self.report,
            last_run=self.last_run, gpus=self.snapshot,
            nvml_stats=dict(getattr(src, "stats", None) or {}),
            xid_counts=self._xid_counts(), last_success=self.last_success,
            cycle_duration=self.cycle_duration, config_reload_ok=self.reload_ok,
            start_time=self.start_time,
        ))

    def _xid_counts(self) -> Dict[Tuple[str, str], int]:
        """The live monitor's counters (kernel log + NVML events, de-duplicated), else the
        gpu-xid check's counts (a bundle or tree: no monitor runs there)."""
        if self.xid_monitor is not None:
            try:
                return {(str(g), str(c)): int(n)
                        for (g, c), n in self.xid_monitor.counter.counts().items()}
            except Exception:  # metrics must render whatever the monitor's state
                return {}
        return xid_counts(self.report)

    def _publish(self, previous: Optional[Report]) -> None:
        body = self._render()
        self.server.publish(body)
        textfile_dir = self.gen.config.run.textfile_dir
        if textfile_dir:
            try:
                metrics.write_textfile(textfile_dir, body)
            except OSError as exc:
                log(self.log, logging.ERROR, "cannot write the textfile", dir=textfile_dir,
                    error=str(exc))
        report = self.report
        assert report is not None
        self._log_changes(previous, report)
        status = verdict_line(report)
        first = not self.ready
        if first:
            self.ready = True
            self.notifier.ready(status)
            log(self.log, logging.INFO, "first full run done", listen=self.listen,
                port=self.server.port, verdict=status)
        else:
            self.notifier.status(status)
        self._pump.offer(report)
        # A cycle leaves cyclic garbage (ctypes/pyudev handles, hosts) that, with so few
        # allocations between cycles, would wait long for a full collection: collect it now,
        # while nobody waits. Then, once, move the start-up heap (modules, pydantic models,
        # the registry) out of the collector's view so no scrape pays for scanning it.
        gc.collect()
        malloc_trim()
        if first:
            gc.freeze()

    def _log_changes(self, previous: Optional[Report], report: Report) -> None:
        before = {r.id: r.status for r in previous.results} if previous else {}
        for r in report.results:
            if previous is not None and before.get(r.id) != r.status:
                log(self.log, logging.INFO, "check changed", check=r.id,
                    old=str(before.get(r.id, "none")), new=str(r.status), summary=r.summary)
        if previous is not None and previous.gate.open != report.gate.open:
            log(self.log, logging.WARNING if not report.gate.open else logging.INFO,
                "gate changed", path=report.path, open=report.gate.open,
                blocking=",".join(report.gate.blocking))

    # -- the driver appearing after start ------------------------------------------------
    def _driver_appeared(self) -> bool:
        """DeviceAllow=char-nvidia* is resolved from /proc/devices when the unit starts: an
        NVIDIA major that appears later is denied by the device cgroup. Exit (75) so that
        Restart=on-failure starts the unit again with the new major allowed."""
        if self.source.bundle is not None or not self.gen.config.run.exit_on_new_driver:
            return False
        now = self.clock.monotonic()
        if now < self._next_driver_poll:
            return False
        self._next_driver_poll = now + DRIVER_POLL_S
        root = self.source.host_root or "/"
        try:  # bounded, and a byte that is not UTF-8 is replaced, never raised
            current = nvidia_majors(read_text_capped(os.path.join(root, "proc/devices")))
        except OSError:
            return False
        if self._majors is None:
            self._majors = current
            return False
        new = current - self._majors
        if new:
            log(self.log, logging.WARNING,
                "NVIDIA driver loaded after start; exiting so systemd restarts the unit and "
                "allows the new devices", majors=",".join(f"{m}:{n}" for m, n in sorted(new)))
            return True
        return False

    # -- the main loop -------------------------------------------------------------------
    def making_progress(self) -> bool:
        now = self.clock.monotonic()
        started = self.cycle_started
        if started is not None:
            return now - started < self.cycle_bound
        return now - self.heartbeat < TICK_S * 3 + self.stall_margin_s

    def loop(self) -> None:
        periods = {Interval.FAST: self.gen.config.run.fast_interval,
                   Interval.SLOW: self.gen.config.run.slow_interval}
        due: Dict[Interval, Optional[float]] = {iv: 0.0 for iv in Interval}
        self._driver_appeared()  # baseline before the first cycle
        mono = self.clock.monotonic
        while not self.stop_event.is_set():
            self.heartbeat = mono()
            if self.reload_event.is_set():  # any number of SIGHUPs so far: one reload
                self.reload_event.clear()
                self._reload()
                periods = {Interval.FAST: self.gen.config.run.fast_interval,
                           Interval.SLOW: self.gen.config.run.slow_interval}
                due = {iv: 0.0 for iv in Interval}  # a new config re-runs everything once
            if self._urgent:
                self._urgent = False
                due[Interval.FAST] = 0.0
            now = mono()
            ready = [iv for iv, t in due.items() if t is not None and t <= now]
            if ready:
                try:
                    self.run_cycle(ready)
                except Exception as exc:  # never let one bad cycle end the agent
                    log(self.log, logging.ERROR, "check cycle failed",
                        error=f"{type(exc).__name__}: {exc}")
                for iv in ready:
                    due[iv] = None if iv == Interval.BOOTSTRAP else now + periods[iv]
            if self._driver_appeared():
                self.exit_code = EXIT_DRIVER_CHANGED
                self.stop()
                break
            self.heartbeat = mono()
            pending = [t for t in due.values() if t is not None]
            wait = min([TICK_S] + [max(0.0, t - mono()) for t in pending])
            self.wake.wait(wait)
            self.wake.clear()

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
        loop = self._workers[0].thread if self._workers else None
        if loop is not None:
            loop.join(stop_timeout_s / 2)  # mid-cycle it may be waiting on a deadline
        self.server.stop()
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


class _StickyFromMemory:
    """The live host, with the sticky-fault fact taken from the XID monitor's memory: a fatal
    fault closes the gate at the next cycle even when the state file could not be written
    (read-only or full state directory); the file is only its copy across restarts."""

    def __init__(self, host: Any, monitor: Any) -> None:
        self._gna_host = host
        self._gna_monitor = monitor

    def __getattr__(self, name: str) -> Any:
        return getattr(self._gna_host, name)

    def fact(self, name: str) -> Any:
        if name == "sticky":
            view = getattr(self._gna_monitor, "view", None)
            state = view() if view is not None else None
            if state is not None:
                return state
        return self._gna_host.fact(name)


def run_main(args: Any, checks: Sequence[Check], loader: Callable[[], Generation]) -> int:
    """`gpu-node-agent run` from the command line's parsed args (agent/cli_run.py)."""
    from agent.cli_run import main

    return main(args, checks, loader)
