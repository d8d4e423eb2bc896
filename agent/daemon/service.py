"""`gpu-node-agent run`: the scheduler. Its process shell (signals, watchdog, supervision,
stop) is agent/daemon/process.py.

Threads: the scheduler thread ("main loop") runs due checks through the Engine, which gives
each check its own thread and deadline and never restarts one still running, so a hanging
check costs one thread and reports `unknown` while the rest go on. Each cycle produces one
immutable Report (agent/report.py) that carries everything the outputs render: the metrics
endpoint and the textfile take it at once (cached bytes, a local file); the output pump hands
it to the slow outputs (the Node, the NFD file), so an API outage never stalls checks or
metrics. The daemon imports neither the host wing nor the check registry: the command line
(agent/cli_run.py) passes the checks, a loader that validates the config (so a reload
validates exactly like a start), the host opener and the outputs (docs/architecture.md).
"""
import contextlib
import gc
import logging
import threading
from collections import deque
from typing import Any, Callable, Deque, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from agent.daemon.cycle import cycle_snapshot, cycle_xid_counts, log_changes, node_facts
from agent.daemon.driver import DriverWatch
from agent.daemon.inputs import DaemonConfig, Generation, Source, sticky_from_memory
from agent.daemon.parts import (
    Clock,
    OutputPump,
    Supervised,
    Waker,
    close_all,
    malloc_trim,
    verdict_line,
)
from agent.daemon.process import ProcessShell
from agent.daemon.sdnotify import Notifier
from agent.daemon.triggers import EventHooks
from agent.daemon.upgrade import UpgradeFollower
from agent.engine import Engine, order_checks, policy_version_of
from agent.logs import log
from agent.model import Check, CheckResult, Interval
from agent.outputs.base import Output
from agent.outputs.metrics import MetricsEndpoint, Rendered, renderer
from agent.outputs.metrics_server import MetricsServer
from agent.outputs.textfile import TextfileOutput
from agent.outputs.webconfig import WebConfig, load_web_config
from agent.records import replace
from agent.report import Report, RunFacts, build_report, min_healthy_of, pending_report

EXIT_DRIVER_CHANGED = 75  # EX_TEMPFAIL: Restart=on-failure brings the unit back
TICK_S = 5.0  # the loop also wakes at once for SIGHUP/SIGTERM and when a cycle is due


class Daemon(ProcessShell, EventHooks):
    def __init__(
        self,
        checks: Sequence[Check],
        loader: Callable[[], Generation],
        source: Source,
        version: str,
        logger: logging.Logger,
        notifier: Optional[Notifier] = None,
        outputs: Sequence[Output] = (),
        outputs_factory: Optional[Callable[[Generation], Sequence[Output]]] = None,
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
        self._gpu_checks = {c.id for c in self.checks if c.uses_gpus}
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
        root = source.devices_root
        self._driver = None if root is None else DriverWatch(root, lambda: self.clock.monotonic())
        made = list(outputs_factory(self.gen)) if outputs_factory else []
        self._pump = OutputPump(self._fixed_outputs + made, logger)
        # The fast outputs, fed in the cycle itself: one exposition per Report for both.
        self._exposition = Rendered(renderer(lambda: self.gen.config.run))  # run.gpu_telemetry
        self.server = MetricsServer(self.listen, self.gen.web,
                                    self._exposition(self._compose(None, "", 0.0)))
        self.endpoint = MetricsEndpoint(self.server, self._exposition)
        self._textfile: Optional[TextfileOutput] = None
        self.upgrade = UpgradeFollower(logger)  # NVML maintenance during a driver upgrade
        self._hook_events()  # urgent cycles, event-driven verdicts (agent/daemon/triggers.py)

    # -- configuration -------------------------------------------------------------------
    def _load_web(self, config: DaemonConfig) -> Optional[WebConfig]:
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
        with self.source.open_host(self.gen) as host:
            yield host if self.xid_monitor is None else sticky_from_memory(host, self.xid_monitor)

    # -- one cycle -----------------------------------------------------------------------
    def run_cycle(self, intervals: Sequence[Interval], trigger: str = "schedule") -> Report:
        """The checks of ``intervals``, or (trigger "event") those a GPU event concerns."""
        gen = self.gen
        ids = (self._event_ids if trigger == "event" else
               [c.id for c in self.checks if c.interval in intervals])
        started = self.clock.monotonic()
        self.cycle_started = self._read_at = started
        self.cycle_log.append((started, self.clock.wall()))
        if self.xid_monitor is not None:  # sticky faults first: the checks read them
            try:
                self.xid_monitor.cycle(self.snapshot)
            except Exception as exc:
                log(self.log, logging.ERROR, "XID monitor failed",
                    error=f"{type(exc).__name__}: {exc}")
        try:
            with self._open_host() as host:
                # before the checks: a driver being replaced means no NVML read this cycle
                self.upgrade.cycle(host, gen.config.run, self.source.gpus, self.xid_monitor)
                results = self.engine.run(host, gen.policy, only=ids, skip=gen.skip)
                self.snapshot = cycle_snapshot(host, self._gpu_checks, results, self.snapshot)
                description = host.description
        finally:
            self.cycle_started = None
        now = self.clock.wall()  # a timestamp written out, never a schedule
        for r in results:
            self.results[r.id] = r
            self.last_run[r.id] = now
        ordered = [self.results[c.id] for c in self.checks if c.id in self.results]
        previous = self.report
        self.last_success = now
        self.cycle_duration = self.clock.monotonic() - started
        self.report = replace(self._compose(ordered, description, now), trigger=trigger)
        self._publish(previous, self.report)
        return self.report

    def _compose(self, results: Optional[Sequence[CheckResult]], description: str,
                 now: float) -> Report:
        """The one value every output renders: the verdicts (None: before the first cycle)
        with the snapshot, the NVML worker's counters, the XID counts and the run's facts."""
        gen = self.gen
        extras: Dict[str, Any] = dict(
            checks=self.checks, gpus=self.snapshot, min_healthy_gpus=min_healthy_of(gen.policy),
            nvml_stats=dict(getattr(self.source.gpus, "stats", None) or {}),
            xid_counts=cycle_xid_counts(self.xid_monitor, results or ()),
            run=RunFacts(last_run=self.last_run, last_success=self.last_success,
                         cycle_duration=self.cycle_duration, config_reload_ok=self.reload_ok,
                         start_time=self.start_time, node=node_facts(self._pump.outputs)),
        )
        if results is None:
            return pending_report(gen.path, description, self.version, **extras)
        return build_report(results, gen.path, gen.strict, description, now, self.version,
                            policy_version=policy_version_of(gen.policy), **extras)

    def _fast_outputs(self) -> List[Output]:
        """The endpoint, and the textfile while run.textfile_dir names a directory."""
        directory = self.gen.config.run.textfile_dir
        if not directory:
            self._textfile = None
        elif self._textfile is None or self._textfile.directory != directory:
            self._textfile = TextfileOutput(directory, self._exposition, self.log)
        return [self.endpoint] + ([self._textfile] if self._textfile is not None else [])

    def _close_outputs(self) -> None:
        close_all([self.endpoint] + ([self._textfile] if self._textfile is not None else []))

    def _publish(self, previous: Optional[Report], report: Report) -> None:
        for out in self._fast_outputs():
            out.publish(report)
        log_changes(self.log, previous, report)
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
        # while nobody waits. Then, once, move the start-up heap (modules, config records,
        # the registry) out of the collector's view so no scrape pays for scanning it.
        gc.collect()
        malloc_trim()
        if first:
            gc.freeze()

    # -- the driver appearing after start (agent/daemon/driver.py) -----------------------
    def _driver_appeared(self) -> bool:
        if self._driver is None or not self.gen.config.run.exit_on_new_driver:
            return False
        new = self._driver.new_majors()
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
            if self._urgent:  # a new sticky fault: an event, else the fast cycle now
                self._urgent = False
                due[Interval.FAST] = self._urgent_due(due[Interval.FAST])
            self._watch_kernel()
            now = mono()
            ready = [iv for iv, t in due.items() if t is not None and t <= now]
            if ready:
                self._guarded(ready, "schedule")
                for iv in ready:
                    due[iv] = None if iv == Interval.BOOTSTRAP else now + periods[iv]
            elif self.events.take(now):  # a GPU event: the checks it concerns, now
                self._guarded([Interval.FAST], "event")
            if self._driver_appeared():
                self.exit_code = EXIT_DRIVER_CHANGED
                self.stop()
                break
            self.heartbeat = mono()
            pending = [t for t in list(due.values()) + [self.events.due_at()] if t is not None]
            wait = min([TICK_S] + [max(0.0, t - mono()) for t in pending])
            self.wake.wait(wait)
            self.wake.clear()
