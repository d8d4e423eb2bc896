"""NVML XID events end to end, in the one NVML worker: the real pynvml in `python -m
agent.nvml.worker --events` against the simulated libnvidia-ml.so.1 (compiled with gcc against
NVIDIA's nvml.h), supervised by agent.nvml.client.NvmlClient, which hands each event to
XidMonitor:

- scenario xid-events.json: XID 48 on GPU 2 then XID 94 on GPU 5 -> 48 is a sticky reset-gpu
  fault on GPU 2, 94 is counted (restart-app); the kernel log's line for the same 48 within
  the dedupe window is not counted twice;
- a snapshot is answered while the worker waits for events, and an XID arrives while
  snapshots run, both by the same process (the call log shows the waits and the queries);
- the wait fails with NVML_ERROR_GPU_IS_LOST (a GPU that fell off the bus): reported once,
  the worker keeps serving snapshots and registers the event set again after a clean one;
- a hung event wait is met by the next request's deadline: one kill, one backoff, and never
  a second worker while the killed one lives;
- maintenance (flag file or API): the one worker exits, so neither snapshots nor events hold
  NVML; the next read starts a fresh worker that waits for events again.

These tests changed when the event wait moved into the snapshot worker: they drove
NvmlEventStream, a second NVML process (the agent's third) with its own restart loop, and
asserted its restarts ("two workers in turn"); now there is one worker and one supervisor.
"""

import os
import time

import pytest

from agent.nvml.client import NvmlClient
from agent.xid.kmsg import parse_line
from agent.xid.monitor import XidMonitor
from agent.xid.state import StateStore
from checks.xid.policy import load_xid_policy
from tests.integration.test_nvml_worker import alive, workers_using
from tests.nvml_sim.fixtures import nvml_sim, nvml_sim_build  # noqa: F401  (fixtures)

pytestmark = pytest.mark.integration


class Lines:
    def __init__(self):
        self.batches = []

    def poll(self):
        return self.batches.pop(0) if self.batches else []


def wait_until(predicate, what, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def monitor(tmp_path):
    src = Lines()
    mon = XidMonitor(StateStore(str(tmp_path / "state"), "boot-1"), load_xid_policy(), source=src)
    mon.start()
    return mon, src


class Seen:
    """The messages the client handed over (from its reader thread)."""

    def __init__(self, mon=None):
        self.messages = []
        self.mon = mon

    def __call__(self, message):
        self.messages.append(dict(message))
        if self.mon is not None:
            self.mon.on_nvml_message(message)

    def of(self, kind):
        return [m for m in self.messages if m.get("event") == kind]


def snapshot(doc):
    return {"gpus": [{"index": i, "uuid": g["uuid"], "pci_bus_id": g["pci_bus_id"]}
                     for i, g in enumerate(doc["gpus"])]}


def test_xid_48_and_94_events_reach_the_state_and_counters(nvml_sim, monitor):  # noqa: F811
    mon, src = monitor
    doc = nvml_sim.use("xid-events.json")
    mon.cycle(snapshot(doc))
    seen = Seen(mon)
    client = nvml_sim.client()
    client.watch_xid(seen)
    wait_until(lambda: client.event_stats["events"] >= 2, "two XID events")
    xids = [(m["code"], m["index"], m["uuid"]) for m in seen.of("xid")]
    assert xids == [(48, 2, doc["gpus"][2]["uuid"]), (94, 5, doc["gpus"][5]["uuid"])]
    assert seen.of("ready") == [{"event": "ready", "gpus": 8}]
    # The kernel log reports the same XID 48 a moment later: one XID, not two.
    nvml_48 = [m for m in seen.of("xid") if m["code"] == 48][0]
    bus = doc["gpus"][2]["pci_bus_id"].split(":", 1)[1].split(".")[0].lower()
    src.batches.append([parse_line(f"3,7,{nvml_48['mono_us'] + 20_000},-;NVRM: Xid "
                                   f"(PCI:0000:{bus}): 48, pid=1, name=x, DBE")])
    state = mon.cycle(snapshot(doc))
    assert mon.counter.counts() == {("2", 48): 1, ("5", 94): 1}
    assert [(f["code"], f["gpu"]["index"], f["class"]) for f in state["faults"]] == [(48, 2, "reset-gpu")]
    assert client.stats["spawns"] == 1 and workers_using(nvml_sim.scenario_path) == [client.worker_pid]


def test_a_snapshot_is_answered_while_events_are_waited_on(nvml_sim):  # noqa: F811
    doc = nvml_sim.use("healthy-8xh100.json")  # no events: the worker sits in its waits
    client = NvmlClient(env=nvml_sim.env(call_log=True), first_deadline_s=20, deadline_s=5)
    nvml_sim.clients.append(client)
    seen = Seen()
    client.watch_xid(seen)
    wait_until(lambda: seen.of("ready"), "the event set registered")
    wait_until(lambda: nvml_sim.calls().count("nvmlEventSetWait_v2") >= 2, "two event waits")
    snap = client.snapshot()
    assert snap["error"] is None and len(snap["gpus"]) == len(doc["gpus"])
    assert snap["worker"]["pid"] == client.worker_pid
    wait_until(lambda: nvml_sim.calls()[-1] == "nvmlEventSetWait_v2", "waiting again after it")
    calls = nvml_sim.calls()
    first_query = calls.index("nvmlSystemGetDriverVersion")
    assert "nvmlEventSetWait_v2" in calls[:first_query]  # waited before the request came
    assert "nvmlEventSetWait_v2" in calls[first_query:]  # and after it was answered
    assert workers_using(nvml_sim.scenario_path) == [snap["worker"]["pid"]]  # one process
    assert client.stats["spawns"] == 1 and client.stats["timeouts"] == 0


def test_an_xid_event_is_delivered_while_snapshots_run(nvml_sim):  # noqa: F811
    doc = nvml_sim.use("healthy-8xh100.json")
    client = nvml_sim.client(deadline_s=5)
    seen = Seen()
    client.watch_xid(seen)
    pids = set()
    for i in range(40):  # bounded: 40 snapshots, the event is added after the 5th
        snap = client.snapshot()
        assert snap["error"] is None, snap["error"]
        pids.add(snap["worker"]["pid"])
        if i == 4:
            doc["events"] = [{"gpu": 3, "xid": 79}]
            nvml_sim.use(doc)
        if seen.of("xid"):
            break
    assert [(m["code"], m["index"], m["uuid"]) for m in seen.of("xid")] == \
        [(79, 3, doc["gpus"][3]["uuid"])]
    assert len(pids) == 1 and client.stats["spawns"] == 1


def test_gpu_lost_wait_is_reported_and_the_worker_keeps_serving(nvml_sim, monitor):  # noqa: F811
    mon, _ = monitor
    doc = nvml_sim.use("xid-events.json")
    client = nvml_sim.client()
    seen = Seen(mon)
    client.watch_xid(seen)
    wait_until(lambda: client.event_stats["events"] >= 2, "the scenario's events")
    pid = client.worker_pid
    doc["errors"] = [{"call": "nvmlEventSetWait_v2", "code": 15}]  # NVML_ERROR_GPU_IS_LOST
    nvml_sim.use(doc)
    wait_until(lambda: client.event_stats["gpu_lost"] >= 1, "GPU lost reported")
    time.sleep(0.5)  # the set is freed: no error per wait while no snapshot re-arms it
    assert client.event_stats["gpu_lost"] == 1
    snap = client.snapshot()  # queries still work, in the same worker
    assert snap["error"] is None and snap["worker"]["pid"] == pid
    wait_until(lambda: client.event_stats["gpu_lost"] >= 2, "armed again after a clean read")
    lost = seen.of("error")[-1]
    assert lost["kind"] == "gpu_lost" and lost["nvml_code"] == 15
    assert client.last_event_error == lost
    assert client.stats["spawns"] == 1 and client.worker_pid == pid


def hung_wait(nvml_sim):  # noqa: F811
    doc = nvml_sim.use("healthy-8xh100.json")
    doc["block"] = [{"call": "nvmlEventSetWait_v2", "ms": 60000}]  # a wedged driver
    return nvml_sim.use(doc)


def test_a_hung_event_wait_is_killed_by_the_one_deadline_with_one_backoff(nvml_sim):  # noqa: F811
    doc = hung_wait(nvml_sim)
    client = nvml_sim.client(deadline_s=1.0, first_deadline_s=1.0, backoff_initial_s=0.5)
    seen = Seen()
    client.watch_xid(seen)
    wait_until(lambda: seen.of("ready"), "the event set registered (then the wait hangs)")
    pid = client.worker_pid
    snap = client.snapshot()
    assert snap["error"]["kind"] == "timeout" and f"worker pid {pid} killed" in snap["error"]["message"]
    assert not alive(pid) and workers_using(nvml_sim.scenario_path) == []
    assert client.stats["timeouts"] == 1 and client.stats["stuck_workers"] == 0
    again = client.snapshot()  # within the backoff: no worker, for snapshots or events
    assert again["error"]["kind"] == "timeout" and "backoff" in again["error"]["message"]
    assert client.stats["spawns"] == 1 and client.worker_pid is None
    doc["block"] = []
    nvml_sim.use(doc)
    time.sleep(0.6)
    healed = client.snapshot()
    assert healed["error"] is None and client.stats["spawns"] == 2
    wait_until(lambda: len(seen.of("ready")) == 2, "the new worker waits for events again")


class _KillThatDoesNotTake(NvmlClient):
    """Signal 0 delivers nothing: the worker outlives its kill, as one in uninterruptible
    sleep inside the driver outlives SIGKILL."""

    KILL_SIGNAL = 0


def test_no_second_worker_while_a_hung_one_lives(nvml_sim):  # noqa: F811
    hung_wait(nvml_sim)
    client = _KillThatDoesNotTake(env=nvml_sim.env(), deadline_s=1.0, first_deadline_s=1.0,
                                  backoff_initial_s=0.1)
    nvml_sim.clients.append(client)
    seen = Seen()
    client.watch_xid(seen)
    wait_until(lambda: seen.of("ready"), "the event set registered")
    assert client.snapshot()["error"]["kind"] == "timeout"
    stuck = client.stuck_pid
    assert stuck is not None and alive(stuck) and client.stats["stuck_workers"] == 1
    time.sleep(0.2)  # past the backoff
    client.watch_xid(seen)  # the events ask for a worker too: still none behind it
    blocked = client.snapshot()
    assert blocked["error"]["kind"] == "worker_stuck" and str(stuck) in blocked["error"]["message"]
    assert client.stats["spawns"] == 1 and workers_using(nvml_sim.scenario_path) == [stuck]
    os.kill(stuck, 9)


def test_maintenance_flag_ends_the_one_worker_for_snapshots_and_events(nvml_sim, tmp_path):  # noqa: F811
    nvml_sim.use("xid-events.json")
    flag = tmp_path / "maintenance"
    client = nvml_sim.client(maintenance_flag=str(flag))
    seen = Seen()
    client.watch_xid(seen)
    wait_until(lambda: client.event_stats["events"] >= 2, "the scenario's events")
    pid = client.worker_pid
    assert pid is not None
    flag.touch()  # no snapshot asked: the worker sees the flag between its waits
    wait_until(lambda: not alive(pid), "the worker gone for maintenance", timeout=10)
    assert seen.of("maintenance") == [{"event": "maintenance", "flag": str(flag)}]
    held = client.snapshot()
    assert held["error"]["kind"] == "maintenance" and client.worker_pid is None
    assert workers_using(nvml_sim.scenario_path) == [] and client.stats["worker_crashes"] == 0
    flag.unlink()
    back = client.snapshot()
    assert back["error"] is None and back["worker"]["pid"] != pid
    wait_until(lambda: len(seen.of("ready")) == 2, "events again from the fresh worker")


def test_maintenance_api_ends_the_one_worker(nvml_sim):  # noqa: F811
    nvml_sim.use("healthy-8xh100.json")
    client = nvml_sim.client()
    seen = Seen()
    client.watch_xid(seen)
    wait_until(lambda: seen.of("ready"), "the event set registered")
    pid = client.worker_pid
    client.maintenance(True, reason="GPU Operator driver upgrade")
    assert not alive(pid) and client.worker_pid is None
    client.watch_xid(seen)  # asking for events in maintenance starts nothing
    assert client.worker_pid is None and client.stats["spawns"] == 1
    assert workers_using(nvml_sim.scenario_path) == []
    client.maintenance(False)
    assert client.snapshot()["error"] is None and client.stats["spawns"] == 2


def test_events_asked_of_a_running_worker_arm_in_it(nvml_sim):  # noqa: F811
    nvml_sim.use("xid-events.json")
    client = nvml_sim.client()
    first = client.snapshot()  # a worker without events (as `check` has)
    assert first["error"] is None and client.event_stats["events"] == 0
    seen = Seen()
    client.watch_xid(seen)  # the same worker registers its event set
    wait_until(lambda: client.event_stats["events"] >= 2, "the scenario's events")
    assert [m["code"] for m in seen.of("xid")] == [48, 94]
    assert client.worker_pid == first["worker"]["pid"] and client.stats["spawns"] == 1
