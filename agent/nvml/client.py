"""The agent's one NVML supervisor: deadlines, kill by PID, respawn with backoff, stuck
workers, maintenance, for the one NVML worker that serves snapshots and XID events.

NVML calls can block forever on a wedged GPU and a blocked thread cannot be cancelled, so
every NVML call happens in ``python -m agent.nvml.worker`` (a child process) and this client
puts a deadline on each request. Past the deadline the worker is SIGKILLed by PID and the
snapshot is an error-encoded one (``error.kind == "timeout"``) that nvml-responsive reports
as "driver unresponsive". A process blocked in the driver (uninterruptible sleep) survives
SIGKILL: the client then never starts a second worker behind it; it counts it
(``stats["stuck_workers"]``) and answers ``worker_stuck`` until the old one is gone.

XID events (``watch_xid(sink)``, `run`'s XID monitor): the same worker also waits on an NVML
event set between requests (agent/nvml/events.py), and a reader thread hands each event line
to ``sink`` as it arrives (agent/nvml/channel.py). There is no second NVML process: a hang in
a query or in an event wait is seen by the next request's deadline, and everything above
(one backoff, the stuck count, maintenance, never a worker behind a live one) holds for
both. Between a kill and the next request no worker runs, so no NVML events arrive (the
kernel log still reports every XID: agent/xid/monitor.py).

API (used by ``check`` through ``NvmlGpuSource`` and by ``run``):
    client = NvmlClient(deadline_s=10, first_deadline_s=60, env=None, library=None)
    client.snapshot() -> dict (docs/gpu-snapshot.md; never raises)
    client.maintenance(True/False); client.check_maintenance_flag(); client.close()
    client.watch_xid(sink)  # sink(message): {"event": "xid" | "error" | "ready", ...}
    client.stats: requests, timeouts, spawns, respawns, stuck_workers, worker_crashes
    client.event_stats: events, errors, gpu_lost; client.last_event_error
"""
import contextlib
import os
import time
from typing import Any, Dict, Mapping, Optional

from agent.nvml.channel import EventSink
from agent.nvml.supervisor import WorkerSupervisor

SCHEMA_VERSION = 1


def error_snapshot(kind: str, message: str, nvml_code: Optional[int] = None) -> Dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "source": "nvml",
        "captured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "error": {"kind": kind, "message": message, "nvml_code": nvml_code},
        "gpus": [],
    }


class NvmlClient(WorkerSupervisor):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # the arguments: agent/nvml/supervisor.py
        self.in_maintenance = False
        self._api_maintenance = False
        self._api_reason = ""  # why the API asked (the snapshot's message names it)
        self._flag_maintenance = False

    # -- public API -------------------------------------------------------------------
    def snapshot(self) -> Dict[str, Any]:
        with self._lock:
            self._poll_maintenance_flag()
            if self.in_maintenance:
                why = self._api_reason if self._api_maintenance else ""
                return error_snapshot("maintenance", f"NVML released for maintenance: {why}" if why
                                      else "NVML released for maintenance; resume to read GPUs")
            missing = self.library.ask(self._proc is not None, self._stop_worker)
            if missing is not None:
                return error_snapshot("library_not_found", missing)
            reply = self._request({"op": "snapshot"})
            if "snapshot" in reply:
                if not isinstance(reply["snapshot"], dict):  # the worker's line is input
                    return error_snapshot("worker_error", "the worker's snapshot is not an "
                                          f"object ({type(reply['snapshot']).__name__})")
                snap = dict(reply["snapshot"])
                snap["worker"] = {"pid": reply.get("_pid"), "wall_s": reply.get("_wall_s")}
                return snap
            return error_snapshot(reply["kind"], reply["message"])

    @property
    def last_event_error(self) -> Optional[Dict[str, Any]]:
        return self._channel.last_error if self._channel is not None else None

    def watch_xid(self, sink: EventSink) -> None:
        """Have the worker wait for XID events too and hand each message to ``sink`` (from
        the reader thread). A worker starts now unless maintenance, the library, a stuck
        worker or the backoff says no; then the next snapshot starts it."""
        with self._lock:
            self._sink = sink
            self._poll_maintenance_flag()
            if self.in_maintenance or self.library.ask(False, self._stop_worker) is not None:
                return
            with contextlib.suppress(OSError):  # a broken pipe: the next snapshot says why
                if self._proc is not None and self._proc.poll() is None:
                    if self._channel is not None:  # before the worker can send an event
                        self._channel.sink = sink
                    self._send({"op": "events", "on": True})  # its reply: skipped, no waiter
                elif self._spawn() is None:
                    self._send({"op": "ping"})  # answered once init and the event set are done

    def maintenance(self, on: bool, reason: str = "") -> None:
        """On: the worker calls nvmlShutdown and exits, so no NVML handle blocks `nvidia-smi
        -r` or a driver unload; no worker is started until maintenance(False). The next
        snapshot after that starts a fresh worker, which loads the (possibly upgraded)
        library anew (docs/runbook-nvml.md). ``reason``: what the maintenance snapshot names
        (agent/daemon/upgrade.py); the flag file holds maintenance on apart from this call."""
        with self._lock:
            self._api_maintenance = on
            self._api_reason = reason if on else ""
            self._apply_maintenance()

    def check_maintenance_flag(self) -> bool:
        """Read the flag file now (a daemon may call this between snapshots so a flag takes
        effect promptly); returns whether maintenance mode is on."""
        with self._lock:
            self._poll_maintenance_flag()
            return self.in_maintenance

    def close(self) -> None:
        with self._lock:
            self._stop_worker()
            self._reap_stuck()

    def __enter__(self) -> "NvmlClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- internals --------------------------------------------------------------------
    def _poll_maintenance_flag(self) -> None:
        if self.maintenance_flag is None:
            return
        self._flag_maintenance = os.path.exists(self.maintenance_flag)
        self._apply_maintenance()

    def _apply_maintenance(self) -> None:
        """Maintenance is on while the API asked for it or the flag file exists."""
        on = self._api_maintenance or self._flag_maintenance
        was, self.in_maintenance = self.in_maintenance, on
        if on and self._proc is not None and self._proc.poll() is None:
            self._request({"op": "maintenance", "on": True}, spawn=False)
            self._stop_worker()
        if was and not on:  # resuming is a fresh start, not a retry
            self._backoff_s, self._not_before = 0.0, 0.0


class NvmlGpuSource:
    """The GpuSource for a live host (``check``, ``collect``): one snapshot, then the worker
    exits, so a one-shot command never leaves NVML open (or a worker) behind."""

    def __init__(self, **client_args: Any) -> None:
        self._args = client_args

    def snapshot(self) -> Optional[Mapping[str, Any]]:
        client = NvmlClient(**self._args)
        try:
            return client.snapshot()
        finally:
            client.close()
