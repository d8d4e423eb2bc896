"""What every check module uses: the core's types plus small shared parsers."""
import re
from typing import Optional, Tuple

from agent.model import (  # noqa: F401  (re-exported for check modules)
    ALL_PATHS,
    DRA_PATHS,
    RUNTIME_HANDLER_PATHS,
    Check,
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
