"""What every check module uses: the core's types plus small shared parsers."""
import re
from typing import Optional, Tuple

from agent.hostview import CommandResult, HostView
from agent.model import (
    ALL_PATHS,
    DRA_PATHS,
    RUNTIME_HANDLER_PATHS,
    Check,
    Failure,
    Interval,
    Outcome,
    Severity,
    Status,
    failed,
    input_missing,
    needs,
    needs_kind,
    not_applicable,
    passed,
    skipped,
    unknown,
    warned,
)

# What check modules import from here (explicit, so mypy --strict sees the re-exports).
__all__ = [
    "ALL_PATHS", "DRA_PATHS", "RUNTIME_HANDLER_PATHS", "Check", "CommandResult", "Failure",
    "HostView", "Interval", "Outcome", "Severity", "Status", "failed", "first_line",
    "input_missing", "needs", "needs_kind", "not_applicable", "passed", "skipped", "unknown",
    "version_str", "version_tuple", "warned",
]

_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


def version_tuple(text: Optional[str]) -> Optional[Tuple[int, int, int]]:
    """The first dotted version in ``text`` ("v1.34.2-eks-1" -> (1, 34, 2)); None if none."""
    if not text:
        return None
    m = _VERSION.search(text)
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def version_str(v: Tuple[int, int, int]) -> str:
    return ".".join(str(p) for p in v)


def first_line(text: str, limit: int = 160) -> str:
    lines = text.strip().splitlines()
    return lines[0][:limit] if lines else ""
