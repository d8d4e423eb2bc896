"""The kernel log: /dev/kmsg records, the journal's kernel lines, dmesg text.

/dev/kmsg (Documentation/ABI/testing/dev-kmsg in the kernel tree) gives one record per
read(): ``pri,seq,ts_usec,flags[,more];message\\n`` followed by optional dictionary lines
that start with a space. Non-printable bytes in the message are escaped as ``\\xNN``. A
reader that falls behind the ring buffer gets EPIPE once, then the next record that still
exists: the gap in ``seq`` is how many records were lost. A non-blocking reader gets EAGAIN
at the end. Opening the device starts at the oldest record still in the buffer, so one pass
is "since boot, as far as the buffer reaches".

When /dev/kmsg cannot be read, the journal's kernel lines are the fallback
(agent/xid/journal.py).

``parse_line`` reads any of these as one text line: a /dev/kmsg record, ``dmesg``
(``[ 12.345678]``), ``dmesg -T`` (``[Sun Feb 23 16:24:18 2025]``), ``dmesg -r``
(``<4>[ 12.3]``), journalctl ``short-monotonic`` and syslog files
(``Mar 26 12:33:30 host kernel: ...``).
"""

import os
import re
import time
from typing import Any, Iterator, List, Optional, Protocol, Sequence, Tuple

from agent.records import record

KMSG_PATH = "/dev/kmsg"
# The kernel's record limit is 1024 bytes of text (PRINTK_MESSAGE_MAX) plus the prefix and
# escapes; 8 KiB is what systemd-journald and util-linux dmesg use for one read.
READ_SIZE = 8192
# A partial line longer than this (a stream that never ends a line) is dropped, so a hostile
# or broken source cannot grow the buffer without bound.
MAX_PENDING = 64 * 1024
# Reads per drain: a source that never runs dry (records written faster than they are read, or
# a read that fails with EPIPE every time) must not keep one drain, and the poll lock the
# cycle shares with the kernel-log watcher, forever. A full ring buffer (CONFIG_LOG_BUF_SHIFT
# is at most 25: 32 MiB, records of at least 32 bytes) fits in one drain; more waits for the
# next one.
MAX_READS_PER_POLL = 1 << 20
# Only NVRM lines matter to the agent; keeping only them bounds memory and keeps unrelated
# kernel messages (which may carry hostnames, addresses) out of bundles.
KEEP_MARKER = "NVRM"
# Timestamps are u64 microseconds in the kernel and journald; a larger number in a line is
# not a timestamp (and str() of an integer past 4,300 digits raises on Python >= 3.11).
MAX_TIMESTAMP = 2**64


@record(frozen=True)
class KernelLine:
    """One kernel log record: its text and whatever time and sequence its format carries."""

    message: str
    mono_us: Optional[int] = None  # kernel timestamp, microseconds since boot
    wall: Optional[float] = None  # epoch seconds, when the format carries a date instead
    seq: Optional[int] = None  # /dev/kmsg sequence number
    priority: Optional[int] = None


class Device(Protocol):
    def read(self, size: int) -> bytes: ...


_ESCAPE = re.compile(rb"\\x([0-9a-fA-F]{2})")


def _unescape(raw: bytes) -> str:
    return _ESCAPE.sub(lambda m: bytes([int(m.group(1), 16)]), raw).decode("utf-8", "replace")


def parse_record(head: bytes) -> Optional[KernelLine]:
    """One /dev/kmsg record's first line (dictionary lines already removed)."""
    prefix, sep, message = head.partition(b";")
    if not sep:
        return None
    fields = prefix.split(b",")
    if len(fields) < 4:
        return None
    if not all(0 < len(f) <= 20 and f.isdigit() for f in fields[:3]):
        return None  # bytes.isdigit() is ASCII only; 20 digits hold any u64
    pri, seq, ts = int(fields[0]), int(fields[1]), int(fields[2])
    if seq >= MAX_TIMESTAMP or ts >= MAX_TIMESTAMP:
        return None
    return KernelLine(_unescape(message.rstrip(b"\n")), ts, None, seq, pri & 7)


class KmsgReader:
    """Records from a /dev/kmsg-like device, one at a time (memory: one pending line).

    ``device.read`` returns bytes (b"" = end of a stream), raises BrokenPipeError for EPIPE
    (records overwritten before we read them) and BlockingIOError for EAGAIN (no more now).
    Also takes a FIFO or a file: a read may then hold several records or part of one.
    """

    def __init__(self, device: Device, after_seq: Optional[int] = None) -> None:
        self._device = device
        self._pending = b""
        self.last_seq = after_seq
        self.records = 0
        self.lost = 0  # records the ring buffer overwrote before we read them
        self.overruns = 0  # EPIPE count
        self.skipped = 0  # lines that were not records (malformed)
        self.eof = False

    def _account(self, rec: KernelLine) -> bool:
        if rec.seq is not None and self.last_seq is not None:
            if rec.seq <= self.last_seq:
                return False  # already seen (a re-read after reopening)
            self.lost += rec.seq - self.last_seq - 1
        if rec.seq is not None:
            self.last_seq = rec.seq
        self.records += 1
        return True

    def _split(self, chunk: bytes) -> Iterator[KernelLine]:
        data = self._pending + chunk
        lines = data.split(b"\n")
        self._pending = lines.pop()
        if len(self._pending) > MAX_PENDING:
            self._pending = b""
            self.skipped += 1
        for line in lines:
            if not line or line[:1] == b" ":
                continue  # dictionary line (" SUBSYSTEM=pci") or blank
            rec = parse_record(line)
            if rec is None:
                self.skipped += 1
            elif self._account(rec):
                yield rec

    def __iter__(self) -> Iterator[KernelLine]:
        """Everything available now; stops at EAGAIN, the end of a stream or after
        MAX_READS_PER_POLL reads (the next iteration goes on from there)."""
        for _ in range(MAX_READS_PER_POLL):
            try:
                chunk = self._device.read(READ_SIZE)
            except BrokenPipeError:
                self.overruns += 1  # the seq gap on the next record counts what was lost
                continue
            except BlockingIOError:
                return
            except InterruptedError:
                continue
            if not chunk:
                self.eof = True
                if self._pending:
                    yield from self._split(b"\n")
                return
            yield from self._split(chunk)


class FdDevice:
    """A real device or FIFO opened non-blocking; ``read`` raises what os.read raises."""

    def __init__(self, path: str = KMSG_PATH) -> None:
        self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))

    def read(self, size: int) -> bytes:
        return os.read(self.fd, size)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def render(rec: KernelLine) -> str:
    """A record as one text line that parse_line reads back (the /dev/kmsg format)."""
    if rec.seq is not None and rec.mono_us is not None:
        return f"{rec.priority or 0},{rec.seq},{rec.mono_us},-;{rec.message}"
    if rec.mono_us is not None:
        return f"[{rec.mono_us // 1_000_000:5d}.{rec.mono_us % 1_000_000:06d}] {rec.message}"
    return rec.message


def read_device_lines(path: str = KMSG_PATH, keep: str = KEEP_MARKER) -> Tuple[List[str], Any]:
    """Since-boot NVRM records from /dev/kmsg (non-blocking, one pass). Raises OSError."""
    dev = FdDevice(path)
    try:
        reader = KmsgReader(dev)
        lines = [render(rec) for rec in reader if keep in rec.message]
    finally:
        dev.close()
    return lines, reader


# -- text lines -------------------------------------------------------------------------
# (?a): \d is [0-9] only. Python's \d also matches other scripts' digits, which a kernel
# never prints. Lengths are bounded: seconds since boot fit in 12 digits for 31,000 years.
_RAW_PRI = re.compile(r"(?a)^<(\d{1,4})>")
_MONO = re.compile(r"(?a)^\[\s*(\d{1,12})\.(\d{1,9})\]\s?")
_CTIME = re.compile(
    r"(?a)^\[(?:[A-Z][a-z]{2} )?([A-Z][a-z]{2})\s+(\d{1,2}) (\d\d):(\d\d):(\d\d) (\d{4})\]\s?"
)
_ISO = re.compile(
    r"(?a)^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d{1,9})?)([+-]\d\d:?\d\d|Z)?"
    r"\s+\S+\s+kernel:\s?"
)
_SYSLOG = re.compile(
    r"(?a)^([A-Z][a-z]{2})\s+(\d{1,2}) (\d\d):(\d\d):(\d\d)\s+\S+\s+kernel:\s?"
)
_KERNEL_TAG = re.compile(r"^\S+\s+kernel:\s?")  # after short-monotonic's "[ ts ] "
_KMSG = re.compile(r"(?a)^(\d{1,20}),(\d{1,20}),(\d{1,20}),[^;]*;")
# syslog's month names are English whatever the locale (RFC 3164 section 4.1.2); calendar's
# month_abbr follows LC_TIME, and importing calendar cost a one-shot `check` about 1 ms.
_MONTHS = {m: i for i, m in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)}


def _mono(m: "re.Match[str]") -> int:
    return int(m.group(1)) * 1_000_000 + int(m.group(2).ljust(6, "0")[:6])


def parse_line(line: str, year: Optional[int] = None) -> KernelLine:
    """Any supported text format; a line with no recognised prefix is all message.
    Dates without a zone are local time (what dmesg -T and syslog print)."""
    line = line.rstrip("\n")
    m = _KMSG.match(line)
    if m:
        try:
            raw = line.encode("utf-8", "surrogateescape")  # bytes read with surrogateescape
        except UnicodeEncodeError:  # a surrogate no byte maps to: not from a device
            raw = line.encode("utf-8", "replace")
        rec = parse_record(raw)
        if rec is not None:
            return rec
    pri = None
    m = _RAW_PRI.match(line)
    if m:
        pri, line = int(m.group(1)) & 7, line[m.end() :]
    m = _MONO.match(line)
    if m:
        rest = line[m.end() :]
        tag = _KERNEL_TAG.match(rest)
        return KernelLine(rest[tag.end() :] if tag else rest, _mono(m), None, None, pri)
    m = _CTIME.match(line)
    if m:
        mon, day, hh, mm, ss, yr = m.groups()
        wall = _local(int(yr), _MONTHS.get(mon, 1), int(day), int(hh), int(mm), int(ss))
        return KernelLine(line[m.end() :], None, wall, None, pri)
    m = _ISO.match(line)
    if m:
        return KernelLine(line[m.end() :], None, _iso(m.group(1), m.group(2)), None, pri)
    m = _SYSLOG.match(line)
    if m:
        mon, day, hh, mm, ss = m.groups()
        yr = year or time.localtime().tm_year
        wall = _local(yr, _MONTHS.get(mon, 1), int(day), int(hh), int(mm), int(ss))
        return KernelLine(line[m.end() :], None, wall, None, pri)
    return KernelLine(line, None, None, None, pri)


def _local(yr: int, mon: int, day: int, hh: int, mm: int, ss: int) -> Optional[float]:
    try:
        return time.mktime((yr, mon, day, hh, mm, ss, 0, 0, -1))
    except (OverflowError, ValueError):
        return None


def _iso(stamp: str, zone: Optional[str]) -> Optional[float]:
    """journalctl -o short-iso(-precise) / rsyslog RFC 3339 stamps."""
    import datetime

    base, _, frac = stamp.replace(",", ".").partition(".")
    tz = "+00:00" if zone in (None, "Z") else zone
    if tz and ":" not in tz:
        tz = tz[:3] + ":" + tz[3:]
    try:
        parsed = datetime.datetime.fromisoformat(f"{base}.{(frac or '0').ljust(6, '0')[:6]}{tz}")
        # year 1 at +14:00 is before datetime.min in UTC: OverflowError, not ValueError
        return parsed.timestamp()
    except (ValueError, OverflowError):
        return None


def parse_lines(lines: Sequence[str]) -> List[KernelLine]:
    return [parse_line(line) for line in lines]
