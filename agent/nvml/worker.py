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

XID events: with ``--events`` (or after ``{"op": "events", "on": true}``) the same process
also holds an NVML event set (agent/nvml/events.py) and waits on it, in bounded waits, while
no request is waiting: one process, one thread, one NVML call at a time, so a hang in a query
or in a wait is seen by the one deadline the agent puts on each request. Event lines carry
no "id"; the agent routes them apart from replies (agent/nvml/channel.py).
"""
import contextlib
import json
import os
import select
import signal
import sys
import time
from typing import Any, Dict, List, Optional

from agent.nvml.events import WAIT_MS, XidWatch, error_event
from agent.nvml.process import (
    LIBRARY_ENV,
    MAINTENANCE_FLAG_ENV,
    NUDGE_SIGNAL,
    import_pynvml,
    load_into,
)

pynvml = import_pynvml()  # before readers, which imports it too (process.py says why)

from agent.nvml.readers import as_text, error_record, read_gpu  # noqa: E402 (after pynvml)

SCHEMA_VERSION = 1


class Worker:
    def __init__(self, load_error: Optional[Dict[str, Any]] = None, events: bool = False) -> None:
        # The named library could not be loaded (agent/nvml/process.py): every snapshot says
        # so, and pynvml is never left to dlopen another libnvidia-ml by its soname.
        self.load_error = load_error
        self.initialized = False
        self.maintenance = False
        self.events = events  # XID events wanted (armed when NVML is up, not in maintenance)
        self.watch = XidWatch(pynvml, self.send)

    def send(self, message: Dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(message, separators=(",", ":")) + "\n")
        sys.stdout.flush()

    def arm_events(self) -> None:
        """Register the XID event set if wanted and not held (at start, after a clean
        snapshot, after "events" on); a failure is one error event, retried next time."""
        if not self.events or self.watch.armed or self.maintenance:
            return
        if self.load_error is not None:
            self.send({"event": "error", **self.load_error})
            return
        try:
            self._init()
            self.watch.arm()
        except pynvml.NVMLError as exc:
            self.watch.disarm()
            self.send(error_event("init", exc))

    def _init(self) -> None:
        if not self.initialized:
            pynvml.nvmlInit()
            self.initialized = True

    def shutdown(self) -> None:
        self.watch.disarm()  # the event set goes before the nvmlShutdown it was made under
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
        elif op == "events":
            self.events = bool(req.get("on", True))
            if not self.events:
                self.watch.disarm()
            reply["events"] = self.events
        elif op == "ping":
            reply["pid"] = os.getpid()
        elif op == "exit":
            return None
        else:
            reply = {"id": req.get("id"), "ok": False, "message": f"unknown op {op!r}"}
        return reply


def answer(worker: Worker, raw: bytes) -> bool:
    """One request line answered; False for "exit"."""
    try:
        req = json.loads(raw)
        if not isinstance(req, dict):
            raise ValueError("a request is a JSON object")
    except ValueError as exc:
        worker.send({"id": None, "ok": False, "message": f"bad request: {exc}"})
        return True
    try:
        reply = worker.handle_request(req)
    except Exception as exc:  # answer, never die silently: the client would time out
        reply = {"id": req.get("id"), "ok": False, "message": f"{type(exc).__name__}: {exc}"}
    if reply is None:
        return False
    worker.send(reply)
    snap = reply.get("snapshot")
    if req.get("op") == "events" or (isinstance(snap, dict) and snap.get("error") is None):
        worker.arm_events()  # after the reply: its latency is the request's alone
    return True


def serve(worker: Worker, fd: int, wait_ms: int = WAIT_MS, flag: Optional[str] = None) -> None:
    """Requests on ``fd`` until "exit" or EOF (the agent closed the pipe or died). While the
    event set is armed and no request is waiting, one bounded event wait at a time; between
    them, the maintenance flag file (``flag``): when it appears the worker says so and exits
    (nvmlShutdown in main), so NVML is let go within one wait, not at the agent's next read."""
    pending = b""
    while True:
        if worker.watch.armed:
            if flag and os.path.exists(flag):
                worker.send({"event": "maintenance", "flag": flag})
                return
            # The agent writes a request, then sends NUDGE_SIGNAL: let it in only here, so it
            # cuts a wait short (nvml.h) and never interrupts a query. One that came while
            # blocked is taken at the unblock, before the select that then sees the request.
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {NUDGE_SIGNAL})
            try:
                idle = not select.select([fd], [], [], 0)[0]
                if idle:
                    worker.watch.wait(wait_ms)
            finally:
                signal.pthread_sigmask(signal.SIG_BLOCK, {NUDGE_SIGNAL})
            if idle:
                continue
        chunk = os.read(fd, 65536)  # blocks only while no event set is armed
        if not chunk:
            return
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for raw in lines:
            if raw.strip() and not answer(worker, raw):
                return


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    # The exact libnvidia-ml the agent named (the GPU Operator's driver root), loaded before
    # pynvml's first call; unset = pynvml dlopens the soname from the host's loader path.
    load_error = load_into(pynvml, os.environ.get(LIBRARY_ENV) or None)
    worker = Worker(load_error, events="--events" in args)
    # A handler (not SIG_IGN) so the signal interrupts the wait's system call; CPython installs
    # it without SA_RESTART (signal(2)). Blocked except around the event wait (serve).
    signal.signal(NUDGE_SIGNAL, lambda *_: None)
    signal.pthread_sigmask(signal.SIG_BLOCK, {NUDGE_SIGNAL})
    worker.arm_events()
    try:
        serve(worker, sys.stdin.fileno(), flag=os.environ.get(MAINTENANCE_FLAG_ENV) or None)
    finally:
        worker.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
