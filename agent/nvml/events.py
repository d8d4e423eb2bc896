"""NVML XID events (``nvmlEventSetWait``) in their own worker process, streamed to the agent.

Worker side: ``python -m agent.nvml.worker --events`` calls ``events_main(pynvml)``: it
registers ``nvmlEventTypeXidCriticalError`` on every GPU and writes one JSON line per event:

    {"event": "ready", "gpus": 8}
    {"event": "xid", "code": 48, "index": 2, "uuid": "GPU-...", "pci_bus_id": "...", "mono_us": ...}
    {"event": "error", "kind": "gpu_lost", "nvml_code": 15, "message": "..."}   then exit 1

This module never imports pynvml (only the NVML worker does: docs/architecture.md); the
worker hands the module in. Events have no timestamp of their own in NVML (nvmlEventData_t),
so the worker stamps them with CLOCK_MONOTONIC, the clock the kernel log's timestamps are
compared with.

Agent side: ``NvmlEventStream(on_event, env=...)`` runs that process, reads its lines in a
thread and calls ``on_event`` (e.g. ``XidMonitor.feed_nvml``). It is a separate process from
the snapshot worker because a thread blocked in nvmlEventSetWait must not delay snapshots,
and because the snapshot client's pipe protocol is request/reply. Like the snapshot worker it
holds no NVML handle in maintenance mode (the flag file exists): the process is killed by PID
and only started again when the flag is gone. A process that exits (GPU lost, driver
unloaded) is restarted with exponential backoff.
"""

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from agent.nvml.process import LibrarySpec, current_choice, identity, spawn_worker, worker_env

WAIT_MS = 1000  # nvmlEventSetWait's timeout: how often the worker notices it should stop
GPU_IS_LOST = 15  # nvmlReturn_t NVML_ERROR_GPU_IS_LOST (nvml.h)
TIMEOUT = 10  # NVML_ERROR_TIMEOUT


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def stream_xid_events(
    nvml: Any, send: Callable[[Dict[str, Any]], None], stop: threading.Event, wait_ms: int = WAIT_MS
) -> int:
    """The worker's loop; returns the process exit code (0 = told to stop)."""
    nvml.nvmlInit()
    event_set = None
    try:
        event_set = nvml.nvmlEventSetCreate()
        gpus: Dict[int, Dict[str, Any]] = {}
        for index in range(int(nvml.nvmlDeviceGetCount())):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                info = {
                    "index": index,
                    "uuid": _text(nvml.nvmlDeviceGetUUID(handle)),
                    "pci_bus_id": _text(nvml.nvmlDeviceGetPciInfo(handle).busId),
                }
                nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, event_set)
                gpus[index] = info
            except nvml.NVMLError as exc:  # one GPU that cannot register does not stop the rest
                send(
                    {
                        "event": "error",
                        "kind": "register",
                        "index": index,
                        "nvml_code": getattr(exc, "value", None),
                        "message": str(exc),
                    }
                )
        send({"event": "ready", "gpus": len(gpus)})
        while not stop.is_set():
            try:
                data = nvml.nvmlEventSetWait_v2(event_set, wait_ms)
            except nvml.NVMLError as exc:
                code = getattr(exc, "value", None)
                if code == TIMEOUT:
                    continue
                kind = "gpu_lost" if code == GPU_IS_LOST else "wait"
                send({"event": "error", "kind": kind, "nvml_code": code, "message": str(exc)})
                return 1
            if not data.eventType & nvml.nvmlEventTypeXidCriticalError:
                continue
            try:
                index = int(nvml.nvmlDeviceGetIndex(data.device))
            except nvml.NVMLError:
                index = -1
            send(
                {
                    "event": "xid",
                    "code": int(data.eventData),
                    "mono_us": int(time.clock_gettime(time.CLOCK_MONOTONIC) * 1_000_000),
                    **gpus.get(index, {"index": index if index >= 0 else None}),
                }
            )
        return 0
    finally:
        if event_set is not None:
            # the driver may be gone; exiting releases everything anyway
            with contextlib.suppress(Exception):
                nvml.nvmlEventSetFree(event_set)
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def events_main(nvml: Any, load_error: Optional[Dict[str, Any]] = None) -> int:
    """``python -m agent.nvml.worker --events``: stream until SIGTERM/SIGINT or stdin closes.
    ``load_error``: the library the agent named could not be loaded (agent/nvml/process.py):
    said once as an error event, then exit 1 (the agent restarts it with backoff)."""
    stop = threading.Event()
    lock = threading.Lock()

    def send(message: Dict[str, Any]) -> None:
        with lock:
            sys.stdout.write(json.dumps(message) + "\n")
            sys.stdout.flush()

    if load_error is not None:
        send({"event": "error", **load_error})
        return 1

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())

    def watch_stdin() -> None:  # the agent died: its end of the pipe closed
        try:
            while sys.stdin.buffer.read(1):
                pass
        finally:
            stop.set()

    threading.Thread(target=watch_stdin, name="stdin-watch", daemon=True).start()
    try:
        return stream_xid_events(nvml, send, stop)
    except nvml.NVMLError as exc:
        code = getattr(exc, "value", None)
        send(
            {
                "event": "error",
                "kind": "gpu_lost" if code == GPU_IS_LOST else "init",
                "nvml_code": code,
                "message": str(exc),
            }
        )
        return 1


class NvmlEventStream:
    """The agent's side: one events worker at a time, restarted with backoff."""

    def __init__(
        self,
        on_event: Callable[[Mapping[str, Any]], Any],
        env: Optional[Mapping[str, str]] = None,
        python: Optional[str] = None,
        maintenance_flag: Optional[str] = None,
        backoff_initial_s: float = 1.0,
        backoff_max_s: float = 300.0,
        library: LibrarySpec = None,
    ) -> None:
        self.on_event = on_event
        self.env = dict(env) if env is not None else None
        # The libnvidia-ml to load (agent/nvml/process.py), asked again before each start.
        self.library = library
        self.python = python or sys.executable
        self.maintenance_flag = maintenance_flag
        self.backoff_initial_s, self.backoff_max_s = backoff_initial_s, backoff_max_s
        self.stats = {"events": 0, "starts": 0, "errors": 0, "gpu_lost": 0}
        self.last_error: Optional[Dict[str, Any]] = None
        self._stop = threading.Event()
        self._proc: Optional[subprocess.Popen[bytes]] = None
        self._thread: Optional[threading.Thread] = None
        self._paused = False  # pause(True): no NVML held, whatever the flag file says

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="nvml-events", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._kill()
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def pid(self) -> Optional[int]:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def pause(self, on: bool) -> None:
        """Hold no NVML handle while on (`run` following a GPU Operator driver upgrade,
        agent/daemon/upgrade.py): the process is killed now; off, it starts again unless the
        flag file exists."""
        self._paused = bool(on)
        if on:
            self._kill()

    def _maintenance(self) -> bool:
        if self._paused:
            return True
        return bool(self.maintenance_flag) and os.path.exists(str(self.maintenance_flag))

    def _kill(self) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            # stuck in the driver: the next start waits for it (poll() is None)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=2.0)

    def _loop(self) -> None:
        backoff = self.backoff_initial_s
        while not self._stop.is_set():
            if self._maintenance():
                self._stop.wait(1.0)
                continue
            started = time.monotonic()
            self._run_one()
            if self._stop.is_set():
                break
            if time.monotonic() - started > 60:
                backoff = self.backoff_initial_s  # it ran fine for a while: start over
            self._stop.wait(backoff)
            backoff = min(backoff * 2, self.backoff_max_s)

    def _run_one(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            return  # the previous one survived its kill: never a second behind it
        choice = current_choice(self.library)
        if choice is not None and choice.path is None:  # not there yet: retried with backoff
            self.stats["errors"] += 1
            self.last_error = {"event": "error", "kind": "library_not_found",
                               "nvml_code": None, "message": choice.reason}
            self.on_event(self.last_error)
            return
        env = worker_env(os.environ if self.env is None else self.env,
                         None if choice is None else choice.path)
        loaded = None if choice is None else (choice.path, identity(str(choice.path)))
        self._proc = spawn_worker(self.python, ["--events"], env=env)
        self.stats["starts"] += 1
        assert self._proc.stdout is not None
        fd, pending = self._proc.stdout.fileno(), b""
        while not self._stop.is_set():
            if self._maintenance():
                self._kill()  # release NVML: `nvidia-smi -r` and driver unloads need it
                return
            if loaded is not None and self._loaded() != loaded:
                self._kill()  # the library was replaced or removed: restart on the new one
                return
            ready, _, _ = select.select([fd], [], [], 1.0)
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                self._handle(line)
        self._kill()

    def _loaded(self) -> Optional[Tuple[Optional[str], Any]]:
        """The named library's path and identity now (None: the host's loader path)."""
        choice = current_choice(self.library)
        if choice is None:
            return None
        return (choice.path, identity(choice.path) if choice.path else None)

    def _handle(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            return
        if not isinstance(message, dict):
            return
        if message.get("event") == "error":
            self.stats["errors"] += 1
            self.stats["gpu_lost"] += message.get("kind") == "gpu_lost"
            self.last_error = message
        elif message.get("event") == "xid":
            self.stats["events"] += 1
        self.on_event(message)
