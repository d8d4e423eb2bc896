"""The one NVML worker's event side without NVML: its request/wait loop (agent/nvml/worker.py
``serve``), the event set (agent/nvml/events.py ``XidWatch``) over a fake pynvml, and the
agent's reader that routes replies and events (agent/nvml/channel.py). The simulated-library
tests are tests/integration/test_xid_nvml_events.py.

Return codes written by hand from nvml.h: NVML_ERROR_TIMEOUT = 10, NVML_ERROR_GPU_IS_LOST = 15;
nvmlEventTypeXidCriticalError = 0x8."""
import json
import os
import queue
import threading
import types
from typing import Any, Dict, List, Optional

from agent.nvml import worker as worker_mod
from agent.nvml.channel import EOF, Channel
from agent.nvml.events import XidWatch


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"nvml error {value}")
        self.value = value


class FakeNvml:
    """Three GPUs; GPU 1 cannot register; ``script`` is what each wait returns or raises."""

    NVMLError = NVMLError
    nvmlEventTypeXidCriticalError = 0x8

    def __init__(self, script: Optional[List[Any]] = None) -> None:
        self.script = list(script or [])
        self.calls: List[str] = []
        self.freed = 0

    def nvmlEventSetCreate(self) -> str:
        return "set"

    def nvmlEventSetFree(self, event_set: Any) -> None:
        self.freed += 1

    def nvmlDeviceGetCount(self) -> int:
        return 3

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> bytes:
        return f"GPU-{handle}".encode()

    def nvmlDeviceGetPciInfo(self, handle: int) -> Any:
        return types.SimpleNamespace(busId=f"00000000:0{handle}:00.0".encode())

    def nvmlDeviceRegisterEvents(self, handle: int, kinds: int, event_set: Any) -> None:
        if handle == 1:
            raise NVMLError(3)  # NVML_ERROR_NOT_SUPPORTED

    def nvmlDeviceGetIndex(self, device: int) -> int:
        return device

    def nvmlEventSetWait_v2(self, event_set: Any, wait_ms: int) -> Any:
        self.calls.append(f"wait {wait_ms}")
        step = self.script.pop(0) if self.script else NVMLError(10)
        if isinstance(step, Exception):
            raise step
        return step


def xid(device: int, code: int) -> Any:
    return types.SimpleNamespace(eventType=0x8, device=device, eventData=code)


def test_arm_registers_every_gpu_it_can_and_says_which_failed():
    sent: List[Dict[str, Any]] = []
    watch = XidWatch(FakeNvml(), sent.append)
    watch.arm()
    assert watch.armed
    assert sent == [
        {"event": "error", "kind": "register", "nvml_code": 3, "message": "nvml error 3", "index": 1},
        {"event": "ready", "gpus": 2},
    ]


def test_a_wait_sends_an_xid_with_its_gpu_and_a_timeout_sends_nothing():
    sent: List[Dict[str, Any]] = []
    nvml = FakeNvml([NVMLError(10), xid(2, 48)])
    watch = XidWatch(nvml, sent.append)
    watch.arm()
    sent.clear()
    watch.wait(150)
    assert sent == [] and watch.armed
    watch.wait(150)
    assert nvml.calls == ["wait 150", "wait 150"]
    assert len(sent) == 1 and isinstance(sent[0].pop("mono_us"), int)
    assert sent == [{"event": "xid", "code": 48, "index": 2, "uuid": "GPU-2",
                     "pci_bus_id": "00000000:02:00.0"}]


def test_gpu_lost_is_said_once_and_frees_the_set():
    sent: List[Dict[str, Any]] = []
    nvml = FakeNvml([NVMLError(15)])
    watch = XidWatch(nvml, sent.append)
    watch.arm()
    sent.clear()
    watch.wait(100)
    assert sent == [{"event": "error", "kind": "gpu_lost", "nvml_code": 15,
                     "message": "nvml error 15"}]
    assert not watch.armed and nvml.freed == 1


class LoopWorker:
    """What ``serve`` needs of a Worker: a watch, ``send`` and ``handle_request``."""

    def __init__(self, nvml: FakeNvml) -> None:
        self.sent: List[Dict[str, Any]] = []
        self.watch = XidWatch(nvml, self.sent.append)
        self.nvml = nvml

    def send(self, message: Dict[str, Any]) -> None:
        self.sent.append(message)

    def handle_request(self, req: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        if req.get("op") == "exit":
            return None
        self.nvml.calls.append(f"request {req['id']}")
        return {"id": req["id"], "ok": True}


def test_serve_answers_a_request_between_bounded_waits():
    nvml = FakeNvml()
    worker = LoopWorker(nvml)
    worker.watch.arm()
    read_end, write_end = os.pipe()
    done = threading.Thread(target=worker_mod.serve, args=(worker, read_end, 20), daemon=True)
    done.start()
    try:
        for _ in range(200):  # bounded: until it has waited a few times
            if nvml.calls.count("wait 20") >= 3:
                break
            threading.Event().wait(0.01)
        os.write(write_end, b'{"id": 7, "op": "ping"}\n')
        for _ in range(200):
            if {"id": 7, "ok": True} in worker.sent and nvml.calls[-1] == "wait 20":
                break
            threading.Event().wait(0.01)
        os.write(write_end, b'{"op": "exit"}\n')
        done.join(5)
    finally:
        os.close(write_end)
        os.close(read_end)
    assert not done.is_alive()
    at = nvml.calls.index("request 7")
    assert "wait 20" in nvml.calls[:at] and "wait 20" in nvml.calls[at + 1:]
    assert {"id": 7, "ok": True} in worker.sent


def test_serve_leaves_when_the_maintenance_flag_appears(tmp_path):
    flag = tmp_path / "nvml-maintenance"
    nvml = FakeNvml()
    worker = LoopWorker(nvml)
    worker.watch.arm()
    read_end, write_end = os.pipe()
    done = threading.Thread(target=worker_mod.serve, args=(worker, read_end, 20, str(flag)),
                            daemon=True)
    done.start()
    try:
        flag.write_text("")
        done.join(5)
    finally:
        os.close(write_end)
        os.close(read_end)
    assert not done.is_alive()
    assert worker.sent[-1] == {"event": "maintenance", "flag": str(flag)}


def test_the_channel_routes_replies_and_events_apart():
    read_end, write_end = os.pipe()
    seen: List[Any] = []

    def sink(message: Any) -> None:
        seen.append(dict(message))
        if message.get("event") == "ready":
            raise RuntimeError("a consumer's bug")  # must not stop the reader

    stats = {"events": 0, "errors": 0, "gpu_lost": 0}
    channel = Channel(os.fdopen(read_end, "rb", buffering=0), sink, stats)
    lines = [{"event": "ready", "gpus": 2}, {"id": 1, "ok": True},
             {"event": "xid", "code": 79, "index": 0},
             {"event": "error", "kind": "gpu_lost", "nvml_code": 15, "message": "lost"}]
    os.write(write_end, b"".join(json.dumps(x).encode() + b"\n" for x in lines) + b"not json\n")
    os.close(write_end)
    assert channel.replies.get(timeout=5) == {"id": 1, "ok": True}
    assert channel.replies.get(timeout=5) is EOF
    assert [m["event"] for m in seen] == ["ready", "xid", "error"]
    assert stats == {"events": 1, "errors": 1, "gpu_lost": 1}
    assert channel.last_error == lines[3]
    channel.stop()
    channel.stop()  # once is enough; twice is harmless


def test_stop_ends_the_reader_of_a_worker_that_keeps_its_pipe_open():
    read_end, write_end = os.pipe()
    channel = Channel(os.fdopen(read_end, "rb", buffering=0), None, {})
    channel.stop()
    try:
        assert channel.replies.get(timeout=5) is EOF
    except queue.Empty:
        raise AssertionError("the reader did not end") from None
    finally:
        os.close(write_end)


def test_a_worker_that_left_for_maintenance_is_not_a_crash(tmp_path):
    """The flag file appeared between the agent's look and the worker's: the worker says so
    and exits before it reads the request. The snapshot says maintenance; no crash counted."""
    from tests.unit.test_nvml_client import shell_worker_snapshot

    snap, client = shell_worker_snapshot(
        tmp_path, "echo '{\"event\": \"maintenance\", \"flag\": \"/f\"}'\nexit 0\n")
    assert snap["error"]["kind"] == "maintenance" and "flag file" in snap["error"]["message"]
    assert client.stats["worker_crashes"] == 0 and client.stats["timeouts"] == 0
