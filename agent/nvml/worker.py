"""The NVML worker: the only process that imports pynvml (PyPI nvidia-ml-py), here and in
agent/nvml/readers.py, which only this process loads.

Run as ``python -m agent.nvml.worker``. It reads one JSON request per line on stdin and
writes one JSON reply per line on stdout, so the agent can put a deadline on every request
and kill this process by PID when the driver wedges (a thread stuck in an ioctl cannot be
cancelled; a process can be killed). Requests:

    {"id": 1, "op": "snapshot"}                  -> {"id": 1, "ok": true, "snapshot": {...}}
    {"id": 2, "op": "maintenance", "on": true}   -> nvmlShutdown, hold nothing until "on": false
    {"id": 3, "op": "ping"}                      -> {"id": 3, "ok": true, "pid": ...}
    {"id": 4, "op": "exit"}

The snapshot's schema is docs/gpu-snapshot.md (schema_version 1); what is read per GPU, and
the nvml.h tables that decode it, is agent/nvml/readers.py (loaded only in this process).

The library: with GNA_NVML_LIBRARY set (an absolute path; the client sets it on a host whose
driver is the GPU Operator's), that exact file is loaded before pynvml's first call
(agent/nvml/process.py); one that cannot be loaded makes every snapshot an error one naming it.

XID streaming: ``python -m agent.nvml.worker --events`` runs
``agent.nvml.events.events_main`` instead, a separate process whose nvmlEventSetWait thread
never delays a snapshot. (Lines without an "id" are events; the snapshot client skips them.)
"""
import contextlib
import json
import os
import sys
import threading
import time
from typing import Any, Dict, List, Optional

import pynvml

from agent.nvml.process import LIBRARY_ENV, load_into
from agent.nvml.readers import as_text, error_record, read_gpu

SCHEMA_VERSION = 1


class Worker:
    def __init__(self, load_error: Optional[Dict[str, Any]] = None) -> None:
        # The named library could not be loaded (agent/nvml/process.py): every snapshot says
        # so, and pynvml is never left to dlopen another libnvidia-ml by its soname.
        self.load_error = load_error
        self.initialized = False
        self.maintenance = False
        self.out_lock = threading.Lock()

    def send(self, message: Dict[str, Any]) -> None:
        line = json.dumps(message, separators=(",", ":"))
        with self.out_lock:  # the event thread writes on the same pipe
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    def _init(self) -> None:
        if not self.initialized:
            pynvml.nvmlInit()
            self.initialized = True

    def shutdown(self) -> None:
        if self.initialized:
            self.initialized = False
            with contextlib.suppress(pynvml.NVMLError):
                pynvml.nvmlShutdown()

    def snapshot(self) -> Dict[str, Any]:
        started = time.monotonic()
        snap: Dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "source": "nvml",
            "captured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "error": None,
            "gpus": [],
        }
        if self.maintenance:
            snap["error"] = {"kind": "maintenance", "nvml_code": None,
                             "message": "NVML released for maintenance (nvmlShutdown)"}
            return snap
        if self.load_error is not None:
            snap["error"] = dict(self.load_error)
            return snap
        try:
            self._init()
            count = int(pynvml.nvmlDeviceGetCount())
        except pynvml.NVMLError as exc:
            self.shutdown()  # retry a full init next time (the driver may come back)
            snap["error"] = error_record(exc)
            return snap
        errors: Dict[str, Any] = {}
        for key, fn in (
            ("driver_version", lambda: as_text(pynvml.nvmlSystemGetDriverVersion())),
            ("nvml_version", lambda: as_text(pynvml.nvmlSystemGetNVMLVersion())),
            ("cuda_driver_version", lambda: int(pynvml.nvmlSystemGetCudaDriverVersion())),
        ):
            try:
                snap[key] = fn()
            except pynvml.NVMLError as exc:
                snap[key] = None
                errors[key] = error_record(exc)
        snap["errors"] = errors
        snap["device_count"] = count
        snap["gpus"] = [read_gpu(i) for i in range(count)]
        snap["duration_s"] = round(time.monotonic() - started, 6)
        return snap

    def handle_request(self, req: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        op = req.get("op")
        reply: Dict[str, Any] = {"id": req.get("id"), "ok": True}
        if op == "snapshot":
            reply["snapshot"] = self.snapshot()
        elif op == "maintenance":
            self.maintenance = bool(req.get("on", True))
            if self.maintenance:
                self.shutdown()
            reply["maintenance"] = self.maintenance
        elif op == "ping":
            reply["pid"] = os.getpid()
        elif op == "exit":
            return None
        else:
            reply = {"id": req.get("id"), "ok": False, "message": f"unknown op {op!r}"}
        return reply


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    # The exact libnvidia-ml the agent named (the GPU Operator's driver root), loaded before
    # pynvml's first call; unset = pynvml dlopens the soname from the host's loader path.
    load_error = load_into(pynvml, os.environ.get(LIBRARY_ENV) or None)
    if "--events" in args:
        # XID streaming runs in its own worker process (agent/nvml/events.py), so a
        # thread blocked in nvmlEventSetWait never delays a snapshot; pynvml is handed in.
        from agent.nvml.events import events_main

        return events_main(pynvml, load_error)
    worker = Worker(load_error)
    for raw in sys.stdin:
        raw = raw.strip()
        if not raw:
            continue
        try:
            req = json.loads(raw)
            if not isinstance(req, dict):
                raise ValueError("a request is a JSON object")
        except ValueError as exc:
            worker.send({"id": None, "ok": False, "message": f"bad request: {exc}"})
            continue
        try:
            reply = worker.handle_request(req)
        except Exception as exc:  # answer, never die silently: the client would time out
            reply = {"id": req.get("id"), "ok": False, "message": f"{type(exc).__name__}: {exc}"}
        if reply is None:
            break
        worker.send(reply)
    worker.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
