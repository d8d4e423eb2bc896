"""Small pieces of `run` kept apart from the scheduler (agent/daemon.py)."""
import contextlib
import logging
import re
import threading
from typing import Any, Dict, Mapping, Optional, Sequence, Set, Tuple

from agent.logs import log
from agent.report import Report

_NVIDIA_CHAR = re.compile(r"^\s*(\d+)\s+(nvidia\S*)\s*$")


def nvidia_majors(text: Optional[str]) -> Set[Tuple[int, str]]:
    """NVIDIA character-device majors in /proc/devices (its "Character devices:" part)."""
    found: Set[Tuple[int, str]] = set()
    for line in (text or "").split("Block devices:")[0].splitlines():
        m = _NVIDIA_CHAR.match(line)
        if m:
            found.add((int(m.group(1)), m.group(2)))
    return found


class OutputPump:
    """Hands the newest Report to each output in its own thread, dropping stale ones."""

    def __init__(self, outputs: Sequence[Any], logger: logging.Logger) -> None:
        self.outputs = list(outputs)
        self.log = logger
        self._cond = threading.Condition()
        self._pending: Optional[Report] = None
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="outputs", daemon=True)

    def start(self) -> None:
        if self.outputs:
            self._thread.start()

    def offer(self, report: Report) -> None:
        with self._cond:
            self._pending = report
            self._cond.notify()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._pending is None and not self._stopped:
                    self._cond.wait()
                if self._stopped:
                    return
                report, self._pending = self._pending, None
            for out in self.outputs:
                try:
                    out.publish(report)
                except Exception as exc:  # an output failing must not stop the others
                    log(self.log, logging.ERROR, "output failed", output=type(out).__name__,
                        error=f"{type(exc).__name__}: {exc}")


def xid_counts(report: Optional[Report]) -> Dict[Tuple[str, str], int]:
    """Per-(GPU, XID) counts since boot, from the gpu-xid check's ``xid_counts`` details
    ({"<gpu>:<code>": n}, checks/gpu_xid.py). <gpu> is the NVML index; a kernel-log line
    that could not be mapped to one keeps its PCI id (still one series per device)."""
    result = report.result("gpu-xid") if report is not None else None
    raw = result.details.get("xid_counts") if result is not None else None
    out: Dict[Tuple[str, str], int] = {}
    if isinstance(raw, Mapping):
        for key, n in raw.items():
            gpu, sep, code = str(key).rpartition(":")
            if sep and code.isdigit() and isinstance(n, int):
                out[(gpu, code)] = n
    return out


def verdict_line(report: Report) -> str:
    counts: Dict[str, int] = {}
    for r in report.results:
        counts[str(r.status)] = counts.get(str(r.status), 0) + 1
    tally = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    if report.gate.open:
        return f"gate {report.path} open; {tally}"
    return f"gate {report.path} CLOSED by {','.join(report.gate.blocking)}; {tally}"


def malloc_trim() -> None:
    """Give freed heap back to the kernel (glibc malloc_trim(3)); a cycle's large buffers
    (command output, the NVML snapshot's JSON) otherwise stay resident until reused."""
    try:
        import ctypes

        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc (musl): nothing to do
        pass


def close_all(outputs: Any) -> None:
    for out in list(outputs):
        closer = getattr(out, "close", None)
        if closer is not None:
            with contextlib.suppress(Exception):
                closer()
