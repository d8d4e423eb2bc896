"""NVML XID events end to end: the real pynvml in `python -m agent.nvml.worker --events` against
the simulated libnvidia-ml.so.1 (compiled with gcc against NVIDIA's nvml.h), streamed by
agent.nvml.events.NvmlEventStream into XidMonitor:

- scenario xid-events.json: XID 48 on GPU 2 then XID 94 on GPU 5 -> 48 is a sticky reset-gpu
  fault on GPU 2, 94 is counted (restart-app); the kernel log's line for the same 48 within
  the dedupe window is not counted twice;
- the wait then fails with NVML_ERROR_GPU_IS_LOST (as for a GPU that fell off the bus): the
  stream reports it and restarts the worker with backoff;
- maintenance mode: no events worker runs (no NVML handle held) while the flag exists.
"""

import time

import pytest

from agent.nvml.events import NvmlEventStream
from agent.xid.kmsg import parse_line
from agent.xid.monitor import XidMonitor
from agent.xid.state import StateStore
from checks.xid.policy import load_xid_policy
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


def snapshot(doc):
    return {"gpus": [{"index": i, "uuid": g["uuid"], "pci_bus_id": g["pci_bus_id"]}
                     for i, g in enumerate(doc["gpus"])]}


def test_xid_48_and_94_events_reach_the_state_and_counters(nvml_sim, monitor):  # noqa: F811
    mon, src = monitor
    doc = nvml_sim.use("xid-events.json")
    mon.cycle(snapshot(doc))
    got = []

    def on_event(message):
        got.append(dict(message))
        mon.on_nvml_message(message)

    stream = NvmlEventStream(on_event, env=nvml_sim.env(), backoff_initial_s=0.2)
    stream.start()
    try:
        wait_until(lambda: stream.stats["events"] >= 2, "two XID events")
    finally:
        stream.stop()
    xids = [(m["code"], m["index"], m["uuid"]) for m in got if m["event"] == "xid"]
    assert xids == [(48, 2, doc["gpus"][2]["uuid"]), (94, 5, doc["gpus"][5]["uuid"])]
    # The kernel log reports the same XID 48 a moment later: one XID, not two.
    nvml_48 = [m for m in got if m["event"] == "xid" and m["code"] == 48][0]
    bus = doc["gpus"][2]["pci_bus_id"].split(":", 1)[1].split(".")[0].lower()
    src.batches.append([parse_line(f"3,7,{nvml_48['mono_us'] + 20_000},-;NVRM: Xid "
                                   f"(PCI:0000:{bus}): 48, pid=1, name=x, DBE")])
    state = mon.cycle(snapshot(doc))
    assert mon.counter.counts() == {("2", 48): 1, ("5", 94): 1}
    assert [(f["code"], f["gpu"]["index"], f["class"]) for f in state["faults"]] == [(48, 2, "reset-gpu")]


def test_gpu_lost_wait_is_reported_and_the_worker_restarts(nvml_sim, monitor):  # noqa: F811
    mon, _ = monitor
    doc = nvml_sim.use("xid-events.json")
    stream = NvmlEventStream(mon.on_nvml_message, env=nvml_sim.env(), backoff_initial_s=0.2)
    stream.start()
    try:
        wait_until(lambda: stream.stats["events"] >= 2, "the scenario's events")
        doc["errors"] = [{"call": "nvmlEventSetWait_v2", "code": 15}]  # NVML_ERROR_GPU_IS_LOST
        nvml_sim.use(doc)
        wait_until(lambda: stream.stats["gpu_lost"] >= 2 and stream.stats["starts"] >= 2,
                   "GPU lost reported by two workers in turn")
    finally:
        stream.stop()
    assert stream.last_error["kind"] == "gpu_lost" and stream.last_error["nvml_code"] == 15
    assert stream.pid is None


def test_maintenance_mode_holds_no_events_worker(nvml_sim, monitor, tmp_path):  # noqa: F811
    mon, _ = monitor
    nvml_sim.use("xid-events.json")
    flag = tmp_path / "maintenance"
    stream = NvmlEventStream(mon.on_nvml_message, env=nvml_sim.env(), maintenance_flag=str(flag),
                             backoff_initial_s=0.2)
    stream.start()
    try:
        wait_until(lambda: stream.pid is not None, "the events worker")
        flag.touch()
        wait_until(lambda: stream.pid is None, "the worker stopped for maintenance")
        time.sleep(1.5)
        assert stream.pid is None
        flag.unlink()
        wait_until(lambda: stream.pid is not None, "the worker back after maintenance")
    finally:
        stream.stop()
