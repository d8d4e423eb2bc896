"""The one NVML worker's supervisor: start it (never behind a live one), put a deadline on
each request, kill it by PID past the deadline, back off before the next start, count the
workers that survive their kill. agent/nvml/client.py builds the public API on top
(snapshots, maintenance, XID events); this is the part both share, so a hang in a query and a
hang in an event wait meet the same deadline, kill and backoff.
"""
import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Dict, Mapping, Optional

from agent.nvml.channel import EOF, Channel, EventSink
from agent.nvml.process import (
    MAINTENANCE_FLAG_ENV,
    NUDGE_SIGNAL,
    LibraryPin,
    close_stdin,
    spawn_worker,
    stderr_tail,
)

REAP_WAIT_S = 2.0  # how long a SIGKILLed worker gets to disappear before it counts as stuck


class WorkerSupervisor:
    # The signal that ends an unresponsive worker. (Tests override it with 0, "no signal",
    # to reproduce a worker that survives its kill, as one stuck in the driver does.)
    KILL_SIGNAL: int = signal.SIGKILL

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
        self.event_stats: Dict[str, int] = {"events": 0, "errors": 0, "gpu_lost": 0}
        self._proc: Optional[subprocess.Popen[bytes]] = None
        self._answered = False  # has the current worker answered once (init done)?
        self._stuck: Optional[subprocess.Popen[bytes]] = None
        self._channel: Optional[Channel] = None  # the running worker's stdout reader
        self._channel_of: Any = None  # the worker it reads
        self._sink: Optional[EventSink] = None  # XID events wanted: where they go
        self._next_id = 0
        self._backoff_s = 0.0
        self._not_before = 0.0
        self._stderr: Optional[Any] = None
        self._lock = threading.RLock()

    @property
    def worker_pid(self) -> Optional[int]:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    @property
    def stuck_pid(self) -> Optional[int]:
        return self._stuck.pid if self._stuck is not None and self._stuck.poll() is None else None

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
        env.pop(MAINTENANCE_FLAG_ENV, None)
        if self.maintenance_flag:
            env[MAINTENANCE_FLAG_ENV] = self.maintenance_flag
        if self._stderr is None:
            self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (lives with the client)
        self._stderr.seek(0)
        self._stderr.truncate()
        self._proc = spawn_worker(self.python, ["--events"] if self._sink else [], env=env,
                                  stderr=self._stderr)
        self._channel = Channel(self._proc.stdout, self._sink, self.event_stats)
        self._channel_of = self._proc
        self.stats["spawns"] += 1
        if self.stats["spawns"] > 1:
            self.stats["respawns"] += 1
        self._answered = False
        return None

    def _send(self, body: Dict[str, Any]) -> int:
        """Write one request with a fresh id; returns the id (OSError: the pipe is gone)."""
        proc = self._proc
        assert proc is not None and proc.stdin is not None
        self._next_id += 1
        proc.stdin.write((json.dumps(dict(body, id=self._next_id)) + "\n").encode())
        proc.stdin.flush()
        if self._sink is not None:  # it may sit in an event wait: cut it short
            with contextlib.suppress(OSError):  # not reaped yet, so still this child's PID
                proc.send_signal(NUDGE_SIGNAL)
        return self._next_id

    def _request(self, body: Dict[str, Any], spawn: bool = True) -> Dict[str, Any]:
        if self._proc is None or self._proc.poll() is not None:
            if self._proc is not None:
                self._release(self._proc)  # it exited between requests
            if not spawn:
                return {"kind": "worker_failed", "message": "no worker"}
            why = self._spawn()
            if why is not None:
                return why
        proc, channel = self._proc, self._channel
        assert proc is not None and channel is not None
        deadline_s = self.deadline_s if self._answered else self.first_deadline_s
        self.stats["requests"] += 1
        started = time.monotonic()
        try:
            req_id = self._send(body)
        except OSError:
            return self._crashed(proc)
        deadline = started + deadline_s
        while True:
            try:
                reply = channel.replies.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                reply = None  # the deadline
            else:
                if reply is EOF:  # the worker closed its stdout: it exited or is exiting
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(REAP_WAIT_S)
            if reply is None:
                if proc.poll() is not None:
                    return self._crashed(proc)
                self.stats["timeouts"] += 1
                self._kill(proc)
                return {"kind": "timeout", "message": (
                    f"driver unresponsive: NVML did not answer within {deadline_s:g}s; "
                    f"worker pid {proc.pid} killed")}
            if reply.get("id") != req_id:
                continue  # a stale reply (of a request given up on, or not waited for)
            if not reply.get("ok"):
                return {"kind": "worker_error", "message": str(reply.get("message"))}
            self._answered = True
            self._backoff_s, self._not_before = 0.0, 0.0
            reply["_pid"] = proc.pid
            reply["_wall_s"] = round(time.monotonic() - started, 6)
            return reply

    def _crashed(self, proc: "subprocess.Popen[bytes]") -> Dict[str, str]:
        channel = self._channel if self._channel_of is proc else None
        if channel is not None:  # the worker is gone or going: its last lines routed first
            channel.ended.wait(REAP_WAIT_S)  # (a failed write can come before its EOF is read)
        if channel is not None and channel.maintenance:
            self._release(proc)  # it saw the flag file and left on purpose: not a crash
            return {"kind": "maintenance", "message": (
                "NVML released for maintenance: the worker saw the flag file")}
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
        self._release(proc)
        self._backoff_s = min(self.backoff_max_s, max(self.backoff_initial_s, self._backoff_s * 2))
        self._not_before = time.monotonic() + self._backoff_s

    def _release(self, proc: "subprocess.Popen[bytes]") -> None:
        """Let go of a worker's pipes: its request pipe, and its reader thread."""
        close_stdin(proc)
        if self._proc is proc:
            self._proc = None
        if self._channel is not None and self._channel_of is proc:
            self._channel.stop()
            self._channel = None

    def _reap_stuck(self) -> None:
        if self._stuck is not None and self._stuck.poll() is not None:
            self._stuck = None

    def _stop_worker(self) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            try:
                self._send({"op": "exit"})  # and the nudge: it may sit in an event wait
                proc.wait(REAP_WAIT_S)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if proc.poll() is None:
            self._kill(proc)
            self._backoff_s, self._not_before = 0.0, 0.0  # an orderly stop is not a failure
        self._release(proc)
