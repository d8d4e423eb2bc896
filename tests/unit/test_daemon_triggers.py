"""Event-driven verdicts (agent/daemon/triggers.py): coalescing and the 1 s rate limit on an
injected clock, which checks an event re-evaluates, the kernel-log watcher on a real pipe,
the daemon's event-driven cycle, and the rule that only scheduled runs count toward the
consecutive open runs (agent/report.py count_opens) in the Publisher and the NFD output."""
import contextlib
import os
import threading
import time
from typing import Any, Dict, List

import pytest

from agent.config import Config
from agent.daemon.inputs import Generation, Source
from agent.daemon.sdnotify import Notifier
from agent.daemon.service import Daemon
from agent.daemon.triggers import EventTrigger, KernelLogWatch, concerned_ids
from agent.host.seam import Host
from agent.logs import setup
from agent.model import Check, CheckResult, Interval, Severity, Status, failed, passed
from agent.outputs.nfd_output import NfdOutput
from agent.outputs.node.publish import Publisher
from agent.records import replace
from agent.report import Report, build_report, count_opens
from agent.safeio.schema import ValidationError
from tests.reliability.helpers import HEALTHY_ROOT


class FakeClock:
    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


# -- the trigger: coalescing and the rate limit ------------------------------------------
def test_a_burst_is_one_evaluation():
    clock = FakeClock()
    trig = EventTrigger(clock, min_gap_s=1.0)
    assert trig.due_at() is None and not trig.take(clock.t)
    for _ in range(50):
        trig.notify()
    assert trig.due_at() == 100.0  # nothing ran before: at once
    assert trig.take(100.0)
    assert not trig.take(100.0) and trig.due_at() is None  # the burst was consumed
    assert (trig.notices, trig.evaluations) == (50, 1)


def test_evaluations_start_at_least_the_gap_apart():
    clock = FakeClock()
    trig = EventTrigger(clock, min_gap_s=1.0)
    trig.notify()
    assert trig.take(100.0)
    clock.t = 100.3
    trig.notify()
    trig.notify()
    assert trig.due_at() == 101.0  # the last start + 1 s, not the notice time
    assert not trig.take(100.9)
    assert trig.take(101.0)
    clock.t = 105.0  # long after: due when noted
    trig.notify()
    assert trig.due_at() == 105.0 and trig.take(105.0)
    assert trig.evaluations == 3


def test_a_scheduled_cycle_covers_events_noted_before_it_started():
    clock = FakeClock()
    trig = EventTrigger(clock, min_gap_s=1.0)
    trig.notify()  # noted at 100.0
    trig.cover(99.0)  # a cycle that began reading before the notice does not cover it
    assert trig.pending()
    trig.cover(100.0)
    assert not trig.pending() and trig.covered == 1 and trig.evaluations == 0


def _check(cid: str, interval: Interval, uses_gpus: bool, run: Any = None) -> Check:
    return Check(id=cid, title=cid, severity=Severity.CRITICAL, gates=("dra",),
                 interval=interval, remediation="-", uses_gpus=uses_gpus,
                 run=run or (lambda h, p: passed("ok")))


def test_an_event_concerns_the_fast_gpu_checks_only():
    checks = [_check("gpu-xid", Interval.FAST, True), _check("gpu-sku", Interval.SLOW, True),
              _check("gpu-workload", Interval.BOOTSTRAP, True),
              _check("time-sync", Interval.FAST, False)]
    assert concerned_ids(checks) == ["gpu-xid"]


def test_the_registry_concerned_set_holds_the_xid_and_health_checks():
    from checks.registry import by_id

    ids = set(concerned_ids(by_id().values()))
    # docs/checks.md: fast checks that read the GPUs or their sticky faults
    assert {"gpu-xid", "gpu-ecc", "nvml-responsive", "gpu-count"} <= ids
    # configs, the workload container and the slow GPU inventory never run on an event
    assert not ids & {"gpu-workload", "gpu-sku", "containerd-cdi", "time-sync", "imex"}


# -- the kernel-log watcher ----------------------------------------------------------------
def test_the_watcher_drains_when_the_descriptor_becomes_readable():
    r, w = os.pipe()
    os.set_blocking(r, False)
    drained = threading.Event()
    stop = threading.Event()

    def drain() -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(r, 4096):
                pass
        drained.set()

    watch = KernelLogWatch(r, drain, stop.is_set, setup()).start()
    try:
        assert not drained.wait(0.3)  # nothing written: no drain
        os.write(w, b"6,1,1,-;NVRM: Xid\n")
        assert drained.wait(10), "no drain after a record arrived"
        assert watch.drains == 1
    finally:
        stop.set()
        watch.thread.join(5)
        os.close(r)
        os.close(w)
    assert not watch.alive()


# -- the daemon's event-driven cycle --------------------------------------------------------
class _Monitor:
    """The XID monitor's surface the daemon uses; ``hit`` plays an XID arriving."""

    def __init__(self) -> None:
        self.on_sticky = None
        self.on_event = None
        self.cycles = 0

    def cycle(self, snapshot: Any) -> Dict[str, Any]:
        self.cycles += 1
        return {}

    def view(self) -> None:
        return None

    def kernel_fd(self) -> int:
        return -1

    def hit(self) -> None:
        self.on_event()


def _daemon(checks: List[Check], monitor: Any, event_driven: bool = True) -> Daemon:
    gen = Generation(Config.model_validate({"run": {
        "fast_interval": 600, "slow_interval": 600, "listen_address": "127.0.0.1:0",
        "event_driven": event_driven}}), None, None, "dra", [])
    src = Source(lambda g: contextlib.nullcontext(Host(HEALTHY_ROOT)), None)
    return Daemon(checks, lambda: gen, src, "t", setup(), notifier=Notifier({}),
                  xid_monitor=monitor)


def test_an_event_runs_the_concerned_checks_only_and_marks_the_report():
    runs: List[str] = []

    def counting(cid: str) -> Any:
        return lambda h, p: (runs.append(cid), passed("ok"))[1]

    checks = [_check("gpu-xid", Interval.FAST, True, counting("gpu-xid")),
              _check("cfg", Interval.SLOW, False, counting("cfg"))]
    monitor = _Monitor()
    d = _daemon(checks, monitor)
    try:
        first = d.run_cycle([Interval.FAST, Interval.SLOW])
        assert first.trigger == "schedule" and sorted(runs) == ["cfg", "gpu-xid"]
        monitor.hit()
        assert d.events.pending() and d.wake.is_set()
        assert d.events.take(d.clock.monotonic())
        runs.clear()
        rep = d.run_cycle([Interval.FAST], "event")
        assert runs == ["gpu-xid"] and rep.trigger == "event"
        assert monitor.cycles == 2  # the XID sources are read first, as in any cycle
        # the slow check's last verdict stays in the Report
        assert [r.id for r in rep.results] == ["gpu-xid", "cfg"]
    finally:
        d.server.stop()


def test_events_are_ignored_when_event_driven_is_off():
    monitor = _Monitor()
    d = _daemon([_check("gpu-xid", Interval.FAST, True)], monitor, event_driven=False)
    try:
        monitor.hit()
        assert not d.events.pending() and d.events.notices == 0
    finally:
        d.server.stop()


def test_event_driven_config_switch_defaults_on():
    assert Config.model_validate({}).run.event_driven is True
    assert Config.model_validate({"run": {"event_driven": False}}).run.event_driven is False
    with pytest.raises(ValidationError):
        Config.model_validate({"run": {"event_driven": "sometimes"}})


def test_the_loop_runs_an_event_evaluation_long_before_the_schedule():
    """fast_interval 600 s: after the first cycle only an event can run gpu-xid again."""
    verdict = {"bad": False}
    seen: List[str] = []

    def xid(h: Any, p: Any) -> Any:
        seen.append("run")
        return failed("XID 79") if verdict["bad"] else passed("ok")

    monitor = _Monitor()
    d = _daemon([_check("gpu-xid", Interval.FAST, True, xid)], monitor)
    t = threading.Thread(target=d.loop, daemon=True)
    t.start()
    try:
        end = time.monotonic() + 20
        while d.report is None and time.monotonic() < end:
            time.sleep(0.01)
        assert d.report is not None and d.report.gate.open and len(seen) == 1
        verdict["bad"] = True
        monitor.hit()
        while d.report.gate.open and time.monotonic() < end:
            time.sleep(0.01)
        assert not d.report.gate.open and d.report.trigger == "event"
        assert len(seen) == 2 and d.events.evaluations == 1
    finally:
        d.stop()
        t.join(10)
        d.server.stop()


# -- consecutive open runs: scheduled only ------------------------------------------------
def _Report(open_: bool, trigger: str) -> Report:
    status = Status.PASS if open_ else Status.FAIL
    result = CheckResult("gpu-xid", "gpu-xid", Severity.CRITICAL, status, "s", "r", ("dra",),
                         {}, 0.0)
    rep = replace(build_report([result], "dra", False, "h", 1.0, "t"), trigger=trigger)
    assert rep.gate.open is open_
    return rep


def test_count_opens_counts_scheduled_open_runs_and_any_close_resets():
    assert count_opens(0, _Report(True, "schedule")) == 1
    assert count_opens(2, _Report(True, "event")) == 2  # an event never advances the streak
    assert count_opens(2, _Report(False, "event")) == 0  # but closes at once
    assert count_opens(2, _Report(False, "schedule")) == 0


def _kube_off_config(tmp_path: Any) -> Config:
    return Config.model_validate({"kube": {"enabled": False},
                                  "nfd": {"enabled": True, "path": str(tmp_path / "f")}})


def test_publisher_and_nfd_output_count_only_scheduled_opens(tmp_path):
    config = _kube_off_config(tmp_path)
    pub = Publisher(config, dry_run=True)
    nfd = NfdOutput(config, dry_run=True)
    seq = [("schedule", True, 1), ("event", True, 1), ("event", True, 1),
           ("schedule", True, 2), ("event", False, 0), ("schedule", True, 1)]
    for trigger, open_, expected in seq:
        rep = _Report(open_, trigger)
        pub.publish(rep)
        nfd.publish(rep)
        assert (pub.opens, nfd.opens) == (expected, expected), (trigger, open_)


def test_a_new_sticky_fault_becomes_an_event_or_with_events_off_the_fast_cycle_now():
    on = _daemon([_check("gpu-xid", Interval.FAST, True)], _Monitor())
    off = _daemon([_check("gpu-xid", Interval.FAST, True)], _Monitor(), event_driven=False)
    try:
        assert on._urgent_due(700.0) == 700.0 and on.events.pending()  # schedule kept
        assert off._urgent_due(700.0) == 0.0 and not off.events.pending()  # as before
    finally:
        on.server.stop()
        off.server.stop()


def test_the_monitor_calls_on_event_for_each_xid_counted_and_a_failed_event_wait(tmp_path):
    from agent.cli import resolve_policy
    from agent.xid.monitor import XidMonitor
    from agent.xid.state import StateStore

    config = Config.model_validate({"state_dir": str(tmp_path)})
    policy = resolve_policy(config, None, "dra").policy.xid
    monitor = XidMonitor(StateStore(str(tmp_path), "boot"), policy, source=None)
    calls: List[str] = []
    monitor.on_event = lambda: calls.append("event")
    xid = {"event": "xid", "code": 13, "index": 0, "uuid": "GPU-0",
           "pci_bus_id": "00000000:9B:00.0", "mono_us": 10_000_000}
    monitor.on_nvml_message(xid)
    assert calls == ["event"]
    # the kernel log's report of the same XID within the dedupe window is not a new one
    monitor._accept(monitor.gpus.resolve(_kmsg_event(13, "0000:9b:00", 10_000_100)))
    assert calls == ["event"]
    monitor.on_nvml_message({"event": "error", "kind": "gpu_lost", "nvml_code": 15,
                             "message": "GPU is lost"})
    assert calls == ["event", "event"]
    monitor.on_nvml_message({"event": "ready", "gpus": 8})
    assert len(calls) == 2


def _kmsg_event(code: int, pci: str, mono_us: int) -> Any:
    from agent.xid.events import XidEvent

    return XidEvent(code=code, pci=pci, source="kmsg", mono_us=mono_us, message="NVRM: Xid")


def test_a_watcher_whose_drain_keeps_failing_gives_up_after_max_failures(monkeypatch):
    from agent.daemon import triggers

    monkeypatch.setattr(triggers, "WATCH_WAIT_S", 0.01)  # the back-off, shortened
    r, w = os.pipe()
    os.write(w, b"x")  # readable for good: every poll(2) returns at once
    calls: List[int] = []

    def broken() -> None:
        calls.append(1)
        raise OSError(5, "Input/output error")

    watch = KernelLogWatch(r, broken, lambda: False, setup()).start()
    try:
        watch.thread.join(20)
        assert not watch.alive(), "the watcher kept retrying a drain that always fails"
        assert len(calls) == triggers.MAX_FAILURES == watch.failures
    finally:
        os.close(r)
        os.close(w)


def test_a_wait_error_clean_snapshots_do_not_cure_triggers_once_a_minute(tmp_path, monkeypatch):
    """The worker re-arms its event set after each clean snapshot (agent/nvml/events.py), so a
    wait error that keeps coming back would trigger an evaluation (and its snapshot, and the
    next error) every second: one trigger per ERROR_EVENT_S (60 s) from wait errors, while
    XIDs keep triggering each time."""
    from agent.cli import resolve_policy
    from agent.xid import monitor as monitor_mod
    from agent.xid.state import StateStore

    now = [5_000_000_000]
    monkeypatch.setattr(monitor_mod, "monotonic_us", lambda: now[0])
    config = Config.model_validate({"state_dir": str(tmp_path)})
    policy = resolve_policy(config, None, "dra").policy.xid
    monitor = monitor_mod.XidMonitor(StateStore(str(tmp_path), "boot"), policy, source=None)
    calls: List[str] = []
    monitor.on_event = lambda: calls.append("event")
    error = {"event": "error", "kind": "wait", "nvml_code": 999, "message": "Unknown Error"}
    monitor.on_nvml_message(error)
    assert calls == ["event"]
    for _ in range(59):  # one a second, as the evaluations it triggers would re-arm it
        now[0] += 1_000_000
        monitor.on_nvml_message(error)
    assert calls == ["event"]
    now[0] += 1_000_000  # 60 s after the first
    monitor.on_nvml_message(error)
    assert calls == ["event", "event"]
    xid = {"event": "xid", "code": 48, "index": 0, "uuid": "GPU-0",
           "pci_bus_id": "00000000:9B:00.0", "mono_us": now[0]}
    monitor.on_nvml_message(xid)  # an XID is never held back by the wait errors' limit
    assert calls == ["event", "event", "event"]
