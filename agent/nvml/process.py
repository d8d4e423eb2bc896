"""One NVML worker child process, as the snapshot client and the event stream both run it.

How it is started (``python -m agent.nvml.worker`` from this installation), how its JSON
lines are read under a deadline, and how its pipes and stderr are closed and read after it
ended. What to do about a worker that is late or gone (kill by PID, backoff, "stuck") is the
caller's: agent/nvml/client.py for snapshots, agent/nvml/events.py for XID events.
"""
import os
import select
import subprocess
import time
from typing import IO, Any, Mapping, Optional, Sequence

WORKER_MODULE = "agent.nvml.worker"
MAX_LINE_BYTES = 64 * 1024 * 1024  # a reply past this is dropped, not buffered on


def package_parent() -> str:
    """The directory holding the ``agent`` package (the checkout, or site-packages), so
    ``-m agent.nvml.worker`` resolves to this very installation whatever the caller's working
    directory. (This file is agent/nvml/process.py: three levels below it.)"""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def spawn_worker(
    python: str,
    args: Sequence[str] = (),
    env: Optional[Mapping[str, str]] = None,
    stderr: Any = subprocess.DEVNULL,
) -> "subprocess.Popen[bytes]":
    """Start ``python -m agent.nvml.worker [args]`` with pipes on stdin and stdout."""
    return subprocess.Popen(
        [python, "-m", WORKER_MODULE, *args],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
        env=dict(os.environ if env is None else env), close_fds=True, cwd=package_parent(),
    )


class LineReader:
    """Whole lines from a worker's stdout, each read under a deadline (memory: one line,
    at most MAX_LINE_BYTES). ``eof`` is set once the worker closed its end."""

    def __init__(self) -> None:
        self.buf = b""
        self.eof = False

    def reset(self) -> None:
        self.buf, self.eof = b"", False

    def read_line(self, fd: int, deadline: float) -> Optional[bytes]:
        """The next line without its newline; None at the deadline (time.monotonic), at EOF
        or when a line outgrew the cap."""
        while b"\n" not in self.buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                return None
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                self.eof = True  # the worker closed its stdout: it exited or is exiting
                return None
            self.buf += chunk
            if len(self.buf) > MAX_LINE_BYTES:
                self.buf = b""
                return None
        line, _, self.buf = self.buf.partition(b"\n")
        return line


def close_pipes(proc: "subprocess.Popen[bytes]") -> None:
    for pipe in (proc.stdin, proc.stdout):
        try:
            if pipe is not None:
                pipe.close()
        except OSError:
            pass


def stderr_tail(stderr: Optional[IO[bytes]]) -> str:
    """The last line the worker wrote on stderr (a crash's reason), at most 300 characters."""
    if stderr is None:
        return ""
    try:
        stderr.seek(0)
        lines = stderr.read()[-4096:].decode("utf-8", "replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""
