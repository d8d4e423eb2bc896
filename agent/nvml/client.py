"""The agent's side of the NVML worker: deadlines, kill by PID, respawn with backoff.

NVML calls can block forever on a wedged GPU and a blocked thread cannot be cancelled, so
every NVML call happens in ``python -m agent.nvml.worker`` (a child process) and this client
puts a deadline on each request. Past the deadline the worker is SIGKILLed by PID and the
snapshot is an error-encoded one (``error.kind == "timeout"``) that nvml-responsive reports
as "driver unresponsive". A process blocked in the driver (uninterruptible sleep) survives
SIGKILL: the client then never starts a second worker behind it; it counts it
(``stats["stuck_workers"]``) and answers ``worker_stuck`` until the old one is gone.

API (used by ``check`` through ``NvmlGpuSource`` and by ``run``):
    client = NvmlClient(deadline_s=10, first_deadline_s=60, env=None, library=None)
    client.snapshot() -> dict (docs/gpu-snapshot.md; never raises)
    client.maintenance(True/False); client.check_maintenance_flag(); client.close()
    client.stats: requests, timeouts, spawns, respawns, stuck_workers, worker_crashes
"""
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Dict, Mapping, Optional

from agent.nvml.process import LibraryPin, LineReader, close_pipes, spawn_worker, stderr_tail

SCHEMA_VERSION = 1
REAP_WAIT_S = 2.0  # how long a SIGKILLed worker gets to disappear before it counts as stuck


def error_snapshot(kind: str, message: str, nvml_code: Optional[int] = None) -> Dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "source": "nvml",
        "captured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "error": {"kind": kind, "message": message, "nvml_code": nvml_code},
        "gpus": [],
    }


class NvmlClient:
    # The signal that ends an unresponsive worker. (Tests override it with 0, "no signal",
    # to reproduce a worker that survives its kill, as one stuck in the driver does.)
    KILL_SIGNAL = signal.SIGKILL

    def __init__(
        self,
        deadline_s: float = 10.0,
        first_deadline_s: float = 60.0,
        env: Optional[Mapping[str, str]] = None,
        backoff_initial_s: float = 1.0,
        backoff_max_s: float = 300.0,
        maintenance_flag: Optional[str] = None,
        python: Optional[str] = None,
        library: Any = None,  # agent.nvml.process.LibrarySpec
    ) -> None:
        self.deadline_s = deadline_s
        # The libnvidia-ml the workers load (agent/nvml/process.py LibraryPin; None: the
        # soname). Not found: no worker, and a library_not_found snapshot says why.
        self.library = LibraryPin(library)
        # First init without persistence mode can take seconds per GPU (NVIDIA driver
        # persistence docs: "the driver ... is initialized each time a client connects").
        self.first_deadline_s = max(first_deadline_s, deadline_s)
        self.env = dict(env) if env is not None else None
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self.maintenance_flag = maintenance_flag
        self.python = python or sys.executable
        self.stats: Dict[str, int] = {
            "requests": 0, "timeouts": 0, "respawns": 0, "spawns": 0,
            "stuck_workers": 0, "worker_crashes": 0,
        }
        self.in_maintenance = False
        self._api_maintenance = False
        self._api_reason = ""  # why the API asked (the snapshot's message names it)
        self._flag_maintenance = False
        self._proc: Optional[subprocess.Popen[bytes]] = None
        self._answered = False  # has the current worker answered once (init done)?
        self._stuck: Optional[subprocess.Popen[bytes]] = None
        self._lines = LineReader()
        self._next_id = 0
        self._backoff_s = 0.0
        self._not_before = 0.0
        self._stderr: Optional[Any] = None
        self._lock = threading.RLock()

    # -- public API -------------------------------------------------------------------
    @property
    def worker_pid(self) -> Optional[int]:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    @property
    def stuck_pid(self) -> Optional[int]:
        return self._stuck.pid if self._stuck is not None and self._stuck.poll() is None else None

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
                snap = dict(reply["snapshot"])
                snap["worker"] = {"pid": reply.get("_pid"), "wall_s": reply.get("_wall_s")}
                return snap
            return error_snapshot(reply["kind"], reply["message"])

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

    def _spawn(self) -> Optional[Dict[str, str]]:
        """Start a worker, or say why not (a stuck one is alive, or backing off)."""
        self._reap_stuck()
        if self._stuck is not None:
            return {"kind": "worker_stuck", "message": (
                f"previous NVML worker pid {self._stuck.pid} is still alive after SIGKILL "
                "(stuck in the driver); not starting another")}
        now = time.monotonic()
        if now < self._not_before:
            return {"kind": "timeout", "message": (
                f"NVML unresponsive; next worker start in {self._not_before - now:.0f}s (backoff)")}
        env = self.library.env(os.environ if self.env is None else self.env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        if self._stderr is None:
            self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (lives with the client)
        self._stderr.seek(0)
        self._stderr.truncate()
        self._proc = spawn_worker(self.python, env=env, stderr=self._stderr)
        self.stats["spawns"] += 1
        if self.stats["spawns"] > 1:
            self.stats["respawns"] += 1
        self._answered = False
        self._lines.reset()
        return None

    def _request(self, body: Dict[str, Any], spawn: bool = True) -> Dict[str, Any]:
        if self._proc is None or self._proc.poll() is not None:
            if self._proc is not None:
                self._proc = None
            if not spawn:
                return {"kind": "worker_failed", "message": "no worker"}
            why = self._spawn()
            if why is not None:
                return why
        proc = self._proc
        assert proc is not None and proc.stdin is not None and proc.stdout is not None
        self._next_id += 1
        req_id = self._next_id
        deadline_s = self.deadline_s if self._answered else self.first_deadline_s
        self.stats["requests"] += 1
        started = time.monotonic()
        try:
            proc.stdin.write((json.dumps(dict(body, id=req_id)) + "\n").encode())
            proc.stdin.flush()
        except OSError:
            return self._crashed(proc)
        deadline = started + deadline_s
        self._lines.eof = False
        while True:
            line = self._lines.read_line(proc.stdout.fileno(), deadline)
            if line is None:
                if self._lines.eof:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(REAP_WAIT_S)
                if proc.poll() is not None:
                    return self._crashed(proc)
                self.stats["timeouts"] += 1
                self._kill(proc)
                return {"kind": "timeout", "message": (
                    f"driver unresponsive: NVML did not answer within {deadline_s:g}s; "
                    f"worker pid {proc.pid} killed")}
            try:
                reply = json.loads(line)
            except ValueError:
                continue
            if not isinstance(reply, dict) or reply.get("id") != req_id:
                continue  # an event line or a stale reply: not ours
            if not reply.get("ok"):
                return {"kind": "worker_error", "message": str(reply.get("message"))}
            self._answered = True
            self._backoff_s, self._not_before = 0.0, 0.0
            reply["_pid"] = proc.pid
            reply["_wall_s"] = round(time.monotonic() - started, 6)
            return reply

    def _crashed(self, proc: "subprocess.Popen[bytes]") -> Dict[str, str]:
        self.stats["worker_crashes"] += 1
        tail = stderr_tail(self._stderr)
        rc = proc.poll()
        self._kill(proc)
        return {"kind": "worker_failed",
                "message": f"NVML worker exited (rc {rc})" + (f": {tail}" if tail else "")}

    def _kill(self, proc: "subprocess.Popen[bytes]") -> None:
        """SIGKILL by PID and reap; a worker that survives is kept as the stuck one."""
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, self.KILL_SIGNAL)
            try:
                proc.wait(REAP_WAIT_S)
            except subprocess.TimeoutExpired:
                self.stats["stuck_workers"] += 1
                self._stuck = proc
        close_pipes(proc)
        if self._proc is proc:
            self._proc = None
        self._backoff_s = min(self.backoff_max_s, max(self.backoff_initial_s, self._backoff_s * 2))
        self._not_before = time.monotonic() + self._backoff_s

    def _reap_stuck(self) -> None:
        if self._stuck is not None and self._stuck.poll() is not None:
            self._stuck = None

    def _stop_worker(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            try:
                assert proc.stdin is not None
                proc.stdin.write(b'{"op":"exit"}\n')
                proc.stdin.flush()
                proc.wait(REAP_WAIT_S)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if proc.poll() is None:
            self._kill(proc)
            self._backoff_s, self._not_before = 0.0, 0.0  # an orderly stop is not a failure
        close_pipes(proc)


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
