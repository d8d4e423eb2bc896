"""One `run` cycle's Report: the GPU snapshot is the one the GPU checks fetched (never a second
NVML call, never a thread of its own), NVML counters and XID counts ride along, and the
daemon opens its Host only through the opener the command line hands it."""
import contextlib
import threading
from typing import Any, List

from agent.daemon.cycle import TIMED_OUT_SNAPSHOT, cycle_snapshot, cycle_xid_counts
from agent.daemon.inputs import Source
from agent.daemon.sdnotify import Notifier
from agent.daemon.service import Daemon
from agent.host.seam import Host
from agent.logs import setup
from agent.model import Check, CheckResult, Interval, Severity, Status, passed
from tests.reliability.helpers import HEALTHY_ROOT, generation

SNAP = {"schema_version": 1, "error": None, "driver_version": "580.95.05",
        "gpus": [{"index": 0, "uuid": "GPU-1"}]}
PREVIOUS = {"schema_version": 1, "error": None, "gpus": []}


class _Gpus:
    """A GpuSource that counts its snapshots, with NVML-client-style counters."""

    def __init__(self) -> None:
        self.calls = 0
        self.stats = {"timeouts": 2, "respawns": 1, "stuck_workers": 0}

    def snapshot(self) -> Any:
        self.calls += 1
        return SNAP


def _result(cid: str, status: Status = Status.PASS, **details: Any) -> CheckResult:
    return CheckResult(cid, cid, Severity.CRITICAL, status, "s", "r", ("dra",), details, 0.0)


def test_host_gives_the_fetched_snapshot_without_asking_again():
    gpus = _Gpus()
    host = Host(HEALTHY_ROOT, gpus=gpus)
    assert host.gpus_if_fetched("not yet") == "not yet" and gpus.calls == 0
    assert host.gpus() == SNAP
    assert host.gpus_if_fetched("not yet") == SNAP and gpus.calls == 1


def test_snapshot_choice():
    gpus = _Gpus()
    host = Host(HEALTHY_ROOT, gpus=gpus)
    # no GPU check ran (only a skip, and a check that is not a GPU check): the previous one
    ran = [_result("gpu-count", Status.SKIP), _result("time-sync")]
    assert cycle_snapshot(host, {"gpu-count"}, ran, PREVIOUS) is PREVIOUS
    # a GPU check ran but never asked for the snapshot: the previous one, and no NVML call
    assert cycle_snapshot(host, {"gpu-count"}, [_result("gpu-count")], PREVIOUS) is PREVIOUS
    assert gpus.calls == 0
    # a GPU check timed out: NVML reported as timed out, the host not asked
    late = [_result("gpu-count", Status.UNKNOWN, timed_out=True)]
    snap = cycle_snapshot(host, {"gpu-count"}, late, PREVIOUS)
    assert snap == TIMED_OUT_SNAPSHOT and snap["error"]["kind"] == "timeout"
    assert gpus.calls == 0
    # the check fetched it: that one
    host.gpus()
    assert cycle_snapshot(host, {"gpu-count"}, [_result("gpu-count")], PREVIOUS) == SNAP
    assert gpus.calls == 1


def test_xid_counts_from_the_monitor_else_the_check():
    class Counter:
        def counts(self):
            return {(0, 79): 3}

    class Monitor:
        counter = Counter()

    checked = [_result("gpu-xid", xid_counts={"0:48": 1})]
    assert cycle_xid_counts(Monitor(), checked) == {("0", "79"): 3}
    assert cycle_xid_counts(None, checked) == {("0", "48"): 1}

    class Broken:
        counter = None

    assert cycle_xid_counts(Broken(), checked) == {}


def test_a_cycle_asks_the_gpus_once_and_the_report_carries_them():
    gpus = _Gpus()
    opened: List[Host] = []

    @contextlib.contextmanager
    def opener(gen: Any):
        host = Host(HEALTHY_ROOT, gpus=gpus)
        opened.append(host)
        yield host

    def reads_gpus(host: Any, policy: Any) -> Any:
        return passed("ok", count=len(host.gpus()["gpus"]))

    check = Check(id="gpu-count", title="gpu-count", severity=Severity.CRITICAL, gates=("dra",),
                  interval=Interval.FAST, remediation="-", run=reads_gpus, uses_gpus=True)
    gen = generation()
    d = Daemon([check], lambda: gen, Source(opener, None, gpus), "test", setup(),
               notifier=Notifier({}))
    try:
        before = {t.ident for t in threading.enumerate()}
        rep = d.run_cycle([Interval.FAST])
        new = [t.name for t in threading.enumerate() if t.ident not in before]
        assert "gpu-snapshot" not in new
        assert gpus.calls == 1 and len(opened) == 1
        assert rep.gpus == SNAP and d.snapshot == SNAP
        assert dict(rep.nvml_stats) == {"timeouts": 2, "respawns": 1, "stuck_workers": 0}
        assert [c.id for c in rep.checks] == ["gpu-count"]
        assert rep.run.last_run["gpu-count"] == rep.generated_at == rep.run.last_success
        assert rep.run.start_time == d.start_time and rep.run.config_reload_ok
        # the endpoint serves this Report's exposition
        body = d.server.payload.body.decode()
        assert 'gpu_node_agent_nvml_timeouts_total 2' in body
        assert 'gpu_node_agent_gpu_info{gpu="0",uuid="GPU-1"' in body
        second = d.run_cycle([Interval.FAST])
        assert gpus.calls == 2 and len(opened) == 2  # a new Host, one snapshot per cycle
        assert second is d.report and second is not rep
    finally:
        d.server.stop()


def test_a_gpu_check_that_never_fetched_costs_no_nvml_call():
    """The daemon itself never asks the GPU source: a GPU check that decided without the
    snapshot leaves the source untouched and the previous snapshot in place."""
    gpus = _Gpus()
    check = Check(id="gpu-count", title="gpu-count", severity=Severity.CRITICAL, gates=("dra",),
                  interval=Interval.FAST, remediation="-", run=lambda h, p: passed("no need"),
                  uses_gpus=True)
    gen = generation()
    d = Daemon([check], lambda: gen,
               Source(lambda g: contextlib.nullcontext(Host(HEALTHY_ROOT, gpus=gpus)), None,
                      gpus), "test", setup(), notifier=Notifier({}))
    try:
        rep = d.run_cycle([Interval.FAST])
        assert gpus.calls == 0
        assert rep.gpus is None and rep.result("gpu-count").status == Status.PASS
    finally:
        d.server.stop()


def test_the_daemon_never_polls_devices_without_a_root():
    gen = generation()
    d = Daemon([], lambda: gen,
               Source(lambda g: contextlib.nullcontext(Host(HEALTHY_ROOT)), None),
               "test", setup(), notifier=Notifier({}))
    try:
        assert gen.config.run.exit_on_new_driver
        assert d._driver_appeared() is False and d._driver is None
    finally:
        d.server.stop()
