"""Running a host command the way every caller needs it: an argv list (never a shell), stdin
closed, a timeout, the C locale, output read up to a cap, and one answer type (CommandResult,
agent/hostview.py) whatever happened, so a missing binary, a hang or a flood is a result a
check can describe, never an exception and never an unbounded read.

It sits in safeio, below every wing (docs/architecture.md): the Host seam (agent/host/seam.py)
and the kernel-log journal fallback (agent/xid/kernel_source.py) both run commands, and neither
may import the other's wing for it.
"""
import os
import threading
from typing import IO, TYPE_CHECKING, Dict, List, Sequence

from agent.hostview import CommandResult

if TYPE_CHECKING:
    import subprocess

# Per stream. The largest output a check reads is `containerd config dump` or the journal's
# kernel lines since boot (a few MiB on a busy host); a command writing more than this is
# stopped rather than held in memory (docs/decisions.md, "Bounded command output").
OUTPUT_CAP = 32 * 1024 * 1024
_CHUNK = 64 * 1024


def _drain(stream: IO[bytes], cap: int, out: List[bytes], over: threading.Event,
           proc: "subprocess.Popen[bytes]") -> None:
    total = 0
    while True:
        try:
            chunk = stream.read1(_CHUNK) if hasattr(stream, "read1") else stream.read(_CHUNK)
        except (OSError, ValueError):  # closed under us: a grandchild kept the pipe open
            return
        if not chunk:
            return
        if total + len(chunk) > cap:
            out.append(chunk[: cap - total])
            over.set()
            proc.kill()  # the rest would only be thrown away; stop the writer
            return
        total += len(chunk)
        out.append(chunk)


class SubprocessCommands:
    """Runs argv lists (never a shell) with a timeout and an output cap; a missing binary is
    rc 127, a timeout rc -9 with ``timed_out``, output over the cap rc -9 with a reason."""

    def __init__(self, output_cap: int = OUTPUT_CAP) -> None:
        self.output_cap = output_cap

    def run(self, argv: Sequence[str], timeout: float) -> CommandResult:
        # Imported here: a bundle's or a bare tree's Host never runs a command, and
        # subprocess brings signal, selectors and fcntl (about 3 ms of a one-shot `check`).
        import subprocess

        args = tuple(argv)
        try:
            proc = subprocess.Popen(
                list(args),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env={**os.environ, "LC_ALL": "C"},
            )
        except FileNotFoundError:
            return CommandResult(args, 127, "", f"{args[0]}: command not found")
        except PermissionError as exc:
            return CommandResult(args, 126, "", str(exc))
        bufs: Dict[str, List[bytes]] = {"out": [], "err": []}
        over = threading.Event()
        assert proc.stdout is not None and proc.stderr is not None
        readers = [
            threading.Thread(target=_drain, args=(s, self.output_cap, bufs[k], over, proc),
                             daemon=True)
            for k, s in (("out", proc.stdout), ("err", proc.stderr))
        ]
        for r in readers:
            r.start()
        timed_out = False
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            proc.kill()
            proc.wait()
        for r in readers:  # the pipes close when the process (and its children) exit
            r.join(timeout=5.0)
        for s in (proc.stdout, proc.stderr):
            s.close()
        out = b"".join(bufs["out"]).decode("utf-8", "replace")
        err = b"".join(bufs["err"]).decode("utf-8", "replace")
        if over.is_set():
            return CommandResult(args, -9, out,
                                 f"output larger than {self.output_cap} bytes; stopped")
        if timed_out:
            return CommandResult(args, -9, out, f"timed out after {timeout:g}s", timed_out=True)
        return CommandResult(args, proc.returncode, out, err)
