"""Running a host command the way every caller needs it: an argv list (never a shell), stdin
closed, a timeout, the C locale, and one answer type (CommandResult) whatever happened, so a
missing binary or a hang is a result a check can describe, never an exception.

It sits in safeio, below every wing (docs/architecture.md): the Host seam (agent/host/seam.py)
and the kernel-log journal fallback (agent/xid/kernel_source.py) both run commands, and neither
may import the other's wing for it.
"""
import os
import subprocess
from dataclasses import dataclass
from typing import Sequence, Tuple


@dataclass(frozen=True)
class CommandResult:
    argv: Tuple[str, ...]
    rc: int
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    # True when the answer does not come from the host at all: the argv was not recorded in
    # the bundle, or commands are unavailable (--host-root). rc is then -1.
    not_recorded: bool = False

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.timed_out and not self.not_recorded

    @property
    def not_installed(self) -> bool:
        # 127 is the shell's "command not found"; bundles record a missing binary that way.
        return self.rc == 127 and not self.not_recorded

    def describe(self) -> str:
        """A one-line reason for a result that is not ok, for check summaries."""
        cmd = " ".join(self.argv)
        if self.not_recorded:
            return f"`{cmd}` not recorded for this host"
        if self.timed_out:
            return f"`{cmd}` timed out"
        if self.not_installed:
            return f"`{self.argv[0]}` not installed"
        first = (self.stderr or self.stdout).strip().splitlines()
        return f"`{cmd}` exited {self.rc}" + (f": {first[0][:160]}" if first else "")


class SubprocessCommands:
    """Runs argv lists (never a shell) with a timeout; a missing binary is rc 127."""

    def run(self, argv: Sequence[str], timeout: float) -> CommandResult:
        args = tuple(argv)
        try:
            proc = subprocess.run(
                list(args),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=timeout,
                check=False,
                env={**os.environ, "LC_ALL": "C"},
            )
        except FileNotFoundError:
            return CommandResult(args, 127, "", f"{args[0]}: command not found")
        except PermissionError as exc:
            return CommandResult(args, 126, "", str(exc))
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode("utf-8", "replace") if exc.stdout else ""
            return CommandResult(args, -9, out, f"timed out after {timeout:g}s", timed_out=True)
        return CommandResult(
            args,
            proc.returncode,
            proc.stdout.decode("utf-8", "replace"),
            proc.stderr.decode("utf-8", "replace"),
        )
