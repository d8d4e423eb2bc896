"""The NVIDIA driver appearing after `run` started.

DeviceAllow=char-nvidia* is resolved from /proc/devices when the unit starts
(systemd.resource-control(5): "char-<name>" matches the majors listed there at that time): an
NVIDIA major that appears later is denied by the device cgroup. The daemon then exits (75,
EX_TEMPFAIL) so that Restart=on-failure starts the unit again with the new major allowed.
"""
import os
import re
from typing import Callable, Optional, Set, Tuple

from agent.safeio.bounded import read_text_capped

POLL_S = 5.0
_NVIDIA_CHAR = re.compile(r"^\s*(\d+)\s+(nvidia\S*)\s*$")


def nvidia_majors(text: Optional[str]) -> Set[Tuple[int, str]]:
    """NVIDIA character-device majors in /proc/devices (its "Character devices:" part)."""
    found: Set[Tuple[int, str]] = set()
    for line in (text or "").split("Block devices:")[0].splitlines():
        m = _NVIDIA_CHAR.match(line)
        if m:
            found.add((int(m.group(1)), m.group(2)))
    return found


class DriverWatch:
    """Polls ``root``/proc/devices at most every POLL_S (monotonic) seconds; the first read is
    the baseline, a later one with a new NVIDIA major is the news."""

    def __init__(self, root: str, monotonic: Callable[[], float]) -> None:
        self.root = root
        self.monotonic = monotonic
        self._majors: Optional[Set[Tuple[int, str]]] = None
        self._next_poll = 0.0

    def new_majors(self) -> Set[Tuple[int, str]]:
        """NVIDIA majors that were not there at the baseline (empty between polls)."""
        now = self.monotonic()
        if now < self._next_poll:
            return set()
        self._next_poll = now + POLL_S
        try:  # bounded, and a byte that is not UTF-8 is replaced, never raised
            current = nvidia_majors(read_text_capped(os.path.join(self.root, "proc/devices")))
        except OSError:
            return set()
        if self._majors is None:
            self._majors = current
            return set()
        return current - self._majors
