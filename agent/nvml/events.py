"""NVML XID events (``nvmlEventSetWait_v2``) inside the one NVML worker process.

The worker (agent/nvml/worker.py) owns one ``XidWatch``: ``arm()`` registers
``nvmlEventTypeXidCriticalError`` on every GPU in one event set, and the worker's loop calls
``wait(ms)`` whenever no request is waiting on its stdin. Each call blocks at most ``ms``:
nvml.h's comment on nvmlEventSetWait_v2 (NVML API Reference) says that "if there are no
events ready to be delivered, function sleeps till event arrives but not longer than
specified timeout", and that it returns NVML_ERROR_TIMEOUT "if no event arrived in specified
timeout or interrupt arrived" and NVML_ERROR_GPU_IS_LOST "if a GPU has fallen off the bus or
is otherwise inaccessible"; it "can return before specified timeout passes (e.g. when
interrupt arrives)", which the agent uses to cut a wait short when it sends a request
(NUDGE_SIGNAL). So a snapshot request waits at most one ``ms`` before it is read;
the worker makes one NVML call at a time, from one thread, on the handles of one nvmlInit. A
wait that never returns (a wedged driver) is seen like a hung query: the next request passes
its deadline and the agent kills the worker (agent/nvml/client.py).

What it writes on the worker's stdout, one JSON line each, with no "id" (replies have one):

    {"event": "ready", "gpus": 8}
    {"event": "xid", "code": 48, "index": 2, "uuid": "GPU-...", "pci_bus_id": "...", "mono_us": ...}
    {"event": "error", "kind": "gpu_lost", "nvml_code": 15, "message": "..."}

After an error the set is freed (``armed`` is False) and the worker arms it again after its
next snapshot that read NVML without error, so a lost GPU is said once per snapshot, not in a
tight loop. This module never imports pynvml: the worker hands the module in. Events have no
timestamp of their own in NVML (nvmlEventData_t), so they are stamped with CLOCK_MONOTONIC,
the clock the kernel log's timestamps are compared with.
"""

import contextlib
import time
from typing import Any, Callable, Dict

# One bounded wait: how often an idle worker wakes (as the separate event process did), and the
# most a request waits before it is read where the agent's nudge (NUDGE_SIGNAL,
# agent/nvml/process.py) does not cut the wait short.
WAIT_MS = 1000
GPU_IS_LOST = 15  # nvmlReturn_t NVML_ERROR_GPU_IS_LOST (nvml.h)
TIMEOUT = 10  # NVML_ERROR_TIMEOUT


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def error_event(kind: str, exc: Any) -> Dict[str, Any]:
    code = getattr(exc, "value", None)
    return {"event": "error", "kind": "gpu_lost" if code == GPU_IS_LOST else kind,
            "nvml_code": code, "message": str(exc)}


class XidWatch:
    """The worker's event set. The caller has called nvmlInit (one init for queries and
    events) and catches the NVMLError ``arm`` may raise before the set exists."""

    def __init__(self, nvml: Any, send: Callable[[Dict[str, Any]], None]) -> None:
        self.nvml = nvml
        self.send = send
        self.event_set: Any = None
        self.gpus: Dict[int, Dict[str, Any]] = {}

    @property
    def armed(self) -> bool:
        return self.event_set is not None

    def arm(self) -> None:
        nvml = self.nvml
        self.disarm()
        self.event_set = nvml.nvmlEventSetCreate()
        self.gpus = {}
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except nvml.NVMLError:
            self.disarm()
            raise
        for index in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                info = {
                    "index": index,
                    "uuid": _text(nvml.nvmlDeviceGetUUID(handle)),
                    "pci_bus_id": _text(nvml.nvmlDeviceGetPciInfo(handle).busId),
                }
                nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError,
                                              self.event_set)
                self.gpus[index] = info
            except nvml.NVMLError as exc:  # one GPU that cannot register does not stop the rest
                self.send(dict(error_event("register", exc), index=index))
        self.send({"event": "ready", "gpus": len(self.gpus)})

    def wait(self, wait_ms: int = WAIT_MS) -> None:
        """One bounded nvmlEventSetWait_v2; an XID found is sent at once."""
        nvml = self.nvml
        try:
            data = nvml.nvmlEventSetWait_v2(self.event_set, wait_ms)
        except nvml.NVMLError as exc:
            if getattr(exc, "value", None) == TIMEOUT:
                return
            self.send(error_event("wait", exc))
            self.disarm()  # armed again after the next clean snapshot
            return
        if not data.eventType & nvml.nvmlEventTypeXidCriticalError:
            return
        try:
            index = int(nvml.nvmlDeviceGetIndex(data.device))
        except nvml.NVMLError:
            index = -1
        self.send({
            "event": "xid",
            "code": int(data.eventData),
            "mono_us": int(time.clock_gettime(time.CLOCK_MONOTONIC) * 1_000_000),
            **self.gpus.get(index, {"index": index if index >= 0 else None}),
        })

    def disarm(self) -> None:
        event_set, self.event_set = self.event_set, None
        if event_set is not None:
            # the driver may be gone; the process's exit releases everything anyway
            with contextlib.suppress(Exception):
                self.nvml.nvmlEventSetFree(event_set)
