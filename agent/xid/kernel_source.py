"""Where the daemon reads new kernel-log lines from, one cycle at a time, without threads.

/dev/kmsg opened non-blocking: each ``poll`` drains what arrived since the last one (the
first drains everything since boot the ring buffer still holds). When it cannot be opened
(dmesg_restrict without CAP_SYSLOG, a container without it), the journal's kernel lines,
continued from the last entry's cursor (``journalctl --after-cursor``).
"""

import logging
from typing import Any, Iterator, List, Optional

from agent.xid.journal import journal_argv, parse_journal_json
from agent.xid.kmsg import KEEP_MARKER, KMSG_PATH, FdDevice, KernelLine, KmsgReader, render

log = logging.getLogger("gpu-node-agent").getChild("kmsg")


class DeviceSource:
    """A /dev/kmsg-like device (or a FIFO / file in its record format, for tests)."""

    name = "kmsg"

    def __init__(self, path: str = KMSG_PATH, device: Any = None) -> None:
        self.path = path
        self._device = device if device is not None else FdDevice(path)
        self.reader = KmsgReader(self._device)
        self._lost_logged = 0

    def poll(self) -> Iterator[KernelLine]:
        """NVRM records that arrived since the last poll, one at a time (a generator: a burst
        of records never sits in memory as a list)."""
        for rec in self.reader:
            if KEEP_MARKER in rec.message:
                yield rec
        if self.reader.lost > self._lost_logged:
            log.warning(
                "kernel log records lost: the ring buffer overran the reader",
                extra={"fields": {"lost": self.reader.lost, "overruns": self.reader.overruns}},
            )
            self._lost_logged = self.reader.lost

    def fileno(self) -> int:
        """The descriptor the daemon's kernel-log watcher polls (-1: none, a test device)."""
        fd = getattr(self._device, "fd", -1)
        return fd if isinstance(fd, int) else -1

    def close(self) -> None:
        close = getattr(self._device, "close", None)
        if close is not None:
            close()


class JournalSource:
    name = "journal"

    def __init__(self, run: Any, directory: Optional[str] = None) -> None:
        self._run = run
        self.directory = directory
        self.cursor: Optional[str] = None

    def poll(self) -> List[KernelLine]:
        argv = journal_argv(self.directory)
        if self.cursor:
            argv.append(f"--after-cursor={self.cursor}")
        res = self._run(argv, timeout=30.0)
        if not getattr(res, "ok", False):
            log.warning("journalctl failed", extra={"fields": {"result": res.describe()}})
            return []
        lines, cursor = parse_journal_json(res.stdout, KEEP_MARKER)
        self.cursor = cursor or self.cursor
        return lines

    def close(self) -> None:
        pass


class NoSource:
    name = "none"

    def poll(self) -> List[KernelLine]:
        return []

    def close(self) -> None:
        pass


def open_kernel_source(
    path: str = KMSG_PATH, run: Any = None, journal_dir: Optional[str] = None
) -> Any:
    try:
        return DeviceSource(path)
    except OSError as exc:
        if run is None:
            from agent.safeio.commands import SubprocessCommands

            run = SubprocessCommands().run
        log.warning(
            "cannot read the kernel log device; using the journal's kernel lines",
            extra={"fields": {"path": path, "error": str(exc)}},
        )
        return JournalSource(run, journal_dir)


def since_boot_lines(
    path: str = KMSG_PATH, run: Any = None, journal_dir: Optional[str] = None
) -> Optional[List[str]]:
    """For a one-shot `check`/`collect`: NVRM lines since boot from /dev/kmsg, else from the
    journal, else None (unknown)."""
    try:
        source: Any = DeviceSource(path)
    except OSError:
        if run is None:
            return None
        from agent.xid.journal import read_journal_lines

        return read_journal_lines(run, directory=journal_dir)
    try:
        return [render(rec) for rec in source.poll()]
    finally:
        source.close()
