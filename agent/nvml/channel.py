"""The agent's end of one NVML worker's stdout: a thread that reads its JSON lines and routes
them, replies (lines with an "id") to a queue the client waits on under its deadline, events
(lines with an "event" and no "id": agent/nvml/events.py) to the XID sink at once, whether or
not a request is in flight.

The thread owns the stdout pipe: it alone closes it, after EOF or after ``stop()``, so its
file descriptor is never closed under a read in progress (and then reused by the next
worker's pipe). ``stop()`` wakes it through a pipe of its own (no polling interval). A worker
stuck in the driver keeps its stdout open; its reader stays until ``stop()``.
"""
import contextlib
import json
import logging
import os
import queue
import select
import threading
from typing import Any, Callable, Dict, Mapping, Optional

from agent.nvml.process import MAX_LINE_BYTES

log = logging.getLogger("gpu-node-agent").getChild("nvml")

EOF = None  # what the reply queue holds once the worker closed its stdout
# Replies kept for the client: it waits for one at a time and skips stale ones, so more than
# a few are lines nobody asked for (a library writing JSON on the worker's stdout); the
# oldest go first, the newest may be the one awaited.
MAX_REPLIES = 64
EventSink = Callable[[Mapping[str, Any]], Any]


class Channel:
    def __init__(self, stdout: Any, sink: Optional[EventSink], stats: Dict[str, int]) -> None:
        self.replies: queue.Queue[Optional[Dict[str, Any]]] = queue.Queue()
        self.sink = sink
        self.stats = stats  # the client's event counters (events, errors, gpu_lost)
        self.last_error: Optional[Dict[str, Any]] = None
        self.maintenance = False  # the worker left because the maintenance flag appeared
        self.ended = threading.Event()  # every line read and routed (EOF or stop())
        self._stdout = stdout
        self._wake_r, self._wake_w = os.pipe()
        self._stopped = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="nvml-reader", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Ask the reader to close the pipe and end (it does within one select). Called once
        for every worker the client lets go; the write end is closed here, so a descriptor
        number is never written to after its reuse."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            with contextlib.suppress(OSError):  # EPIPE: the reader already ended at EOF
                os.write(self._wake_w, b"x")
            os.close(self._wake_w)

    def _run(self) -> None:
        fd, pending, skipping = self._stdout.fileno(), bytearray(), False
        try:
            while True:
                ready, _, _ = select.select([fd, self._wake_r], [], [])
                if self._wake_r in ready:
                    return
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    return
                # Each byte is looked at once (a bytearray grows in place; a line split off
                # only when its newline came), so a long line costs its length, not its square.
                *lines, rest = chunk.split(b"\n")
                for line in lines:
                    if not skipping and len(pending) + len(line) <= MAX_LINE_BYTES:
                        self._route(bytes(pending + line) if pending else line)
                    pending.clear()
                    skipping = False
                if skipping or len(pending) + len(rest) > MAX_LINE_BYTES:
                    # a line past the cap is dropped whole, up to its newline: its tail is
                    # not a line of its own
                    pending.clear()
                    skipping = True
                else:
                    pending += rest
        finally:
            self.ended.set()
            self.replies.put(EOF)
            with contextlib.suppress(OSError):
                self._stdout.close()
            os.close(self._wake_r)

    def _route(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except (ValueError, RecursionError):  # nesting past the interpreter's recursion limit
            return
        if not isinstance(message, dict):
            return
        if "id" in message:
            if self.replies.qsize() >= MAX_REPLIES:
                with contextlib.suppress(queue.Empty):
                    self.replies.get_nowait()
            self.replies.put(message)
            return
        kind = message.get("event")
        if kind == "xid":
            self.stats["events"] += 1
        elif kind == "maintenance":
            self.maintenance = True
        elif kind == "error":
            self.stats["errors"] += 1
            self.stats["gpu_lost"] += message.get("kind") == "gpu_lost"
            self.last_error = message
        if self.sink is not None:
            try:
                self.sink(message)
            except Exception:  # a consumer's bug must never stop the worker's replies
                log.exception("NVML event consumer failed")
