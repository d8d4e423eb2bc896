"""The journal's kernel lines: the fallback when /dev/kmsg cannot be read.

dmesg_restrict=1 without CAP_SYSLOG, or a container without the device, leaves the kernel log
to journald: ``journalctl -k -b -o json`` gives this boot's kernel records, one JSON object a
line (systemd.journal-fields(7)). The kernel's own timestamp is ``_SOURCE_MONOTONIC_TIMESTAMP``
(journald keeps it for kernel records), so these lines compare with /dev/kmsg's. Lines are
returned as agent/xid/kmsg.py's KernelLine, or rendered to its text format.
"""

import json
from typing import Any, Callable, List, Optional, Tuple

from agent.xid.kmsg import KEEP_MARKER, MAX_TIMESTAMP, KernelLine, render

JOURNAL_ARGV = ("journalctl", "-k", "-b", "-o", "json", "--no-pager")


def _journal_message(value: Any) -> Optional[str]:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(
        isinstance(b, int) and not isinstance(b, bool) and 0 <= b < 256 for b in value
    ):
        return bytes(value).decode("utf-8", "replace")  # journald's form for non-UTF-8
    return None


def _journal_int(value: Any) -> Optional[int]:
    """journald's numeric fields are decimal strings (systemd.journal-fields(7)); anything
    else, or a value past 2**63 (not a kernel timestamp), is None."""
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and 0 < len(value) <= 20 and value.isascii() and value.isdigit():
        number = int(value)
    else:
        return None
    return number if 0 <= number < MAX_TIMESTAMP else None


def parse_journal_json(
    text: str, keep: str = KEEP_MARKER
) -> Tuple[List[KernelLine], Optional[str]]:
    """Lines of ``journalctl -o json``; returns the kernel lines and the last cursor."""
    out: List[KernelLine] = []
    cursor = None
    for raw in text.splitlines():
        try:
            entry = json.loads(raw)
        except (ValueError, RecursionError):  # RecursionError: nesting past the C stack
            continue
        if not isinstance(entry, dict):
            continue
        cursor = entry.get("__CURSOR", cursor)
        message = _journal_message(entry.get("MESSAGE"))
        if message is None or keep not in message:
            continue
        mono_us = _journal_int(
            entry.get("_SOURCE_MONOTONIC_TIMESTAMP") or entry.get("__MONOTONIC_TIMESTAMP")
        )
        wall_us = _journal_int(entry.get("__REALTIME_TIMESTAMP"))
        prio = _journal_int(entry.get("PRIORITY"))
        out.append(
            KernelLine(
                message.rstrip("\n"),
                mono_us,
                wall_us / 1e6 if wall_us is not None else None,
                None,
                prio & 7 if prio is not None else None,
            )
        )
    return out, cursor


def journal_argv(directory: Optional[str] = None) -> List[str]:
    """``directory``: a journal directory other than the system's (a container that mounts
    the host's /var/log/journal somewhere else)."""
    return list(JOURNAL_ARGV) + ([f"--directory={directory}"] if directory else [])


def read_journal_lines(
    run: Callable[..., Any], keep: str = KEEP_MARKER, directory: Optional[str] = None
) -> Optional[List[str]]:
    """NVRM kernel lines of this boot from the journal; None when journalctl cannot answer.
    ``run`` is Host.run (or anything with its signature)."""
    res = run(journal_argv(directory), timeout=30.0)
    if not getattr(res, "ok", False):
        return None
    lines, _ = parse_journal_json(res.stdout, keep)
    return [render(rec) for rec in lines]
