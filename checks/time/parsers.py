"""Pure parsers for the time-sync check: chronyc CSV, timedatectl, ntpq, the kernel's timex.

Every parser returns a value or ``Unparsable(reason)``; none raises on any input text, so
garbage or truncated daemon output becomes an `unknown` verdict with a clear summary
(tests/fuzz/test_fuzz_time_sync.py holds them to it). Numbers are ASCII digits of bounded
length: ``str.isdigit`` also accepts "²" and other scripts' digits, which ``int`` refuses or
no daemon prints, and ``int`` of more than 4,300 digits raises on Python >= 3.11.
"""
import math
import re
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

from agent.records import record


@record(frozen=True)
class Unparsable:
    reason: str


def _excerpt(text: str, limit: int = 60) -> str:
    return repr(text.strip()[:limit])


def _clean(text: str) -> str:
    """Text safe to print: a lone surrogate (a bundle's YAML or JSON can carry one; no
    stream can encode it) becomes "?"."""
    return text.encode("utf-8", "replace").decode("utf-8")


def _uint(text: str, digits: int = 9) -> Optional[int]:
    """A non-negative decimal of at most ``digits`` ASCII digits, else None."""
    if 0 < len(text) <= digits and text.isascii() and text.isdigit():
        return int(text)
    return None


def _float(text: str) -> Optional[float]:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


# -- chrony -----------------------------------------------------------------------------
# `chronyc -c tracking`: 14 comma-separated fields, the order of the `tracking` report
# (chronyc(1), "tracking"): refid, name, stratum, ref time, system time offset (s, positive
# = fast), last offset, RMS offset, frequency, residual freq, skew, root delay, root
# dispersion, update interval, leap status.
LEAP_STATUSES = ("Normal", "Insert second", "Delete second", "Not synchronised")
# The reference ID chrony uses for its own `local` reference: 127.127.1.1 (chrony.conf(5),
# "local"); the name field is then empty.
CHRONY_LOCAL_REFID = "7F7F0101"


@record(frozen=True)
class ChronyTracking:
    refid: str
    name: str
    stratum: int
    offset_s: float
    root_delay_s: float
    root_dispersion_s: float
    leap: str

    @property
    def synchronised(self) -> bool:
        return self.leap != "Not synchronised" and self.refid != "00000000"

    @property
    def local_only(self) -> bool:
        return self.refid == CHRONY_LOCAL_REFID or not self.name


def parse_chrony_tracking(text: str) -> Union[ChronyTracking, Unparsable]:
    text = _clean(text)
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if len(lines) != 1:
        return Unparsable(f"expected one CSV line, got {len(lines)}: {_excerpt(text)}")
    fields = lines[0].split(",")
    if len(fields) != 14:
        return Unparsable(f"expected 14 CSV fields, got {len(fields)}: {_excerpt(text)}")
    refid, name, stratum = fields[0], fields[1], _uint(fields[2])
    if not re.fullmatch(r"[0-9A-Fa-f]{8}", refid) or stratum is None:
        return Unparsable(f"bad reference ID or stratum: {_excerpt(text)}")
    nums = [_float(f) for f in (fields[4], fields[10], fields[11])]
    if any(n is None for n in nums) or fields[13] not in LEAP_STATUSES:
        return Unparsable(f"bad offset, root delay/dispersion or leap status: {_excerpt(text)}")
    offset, delay, dispersion = (float(n) for n in nums if n is not None)
    return ChronyTracking(refid.upper(), name, stratum, offset, delay, dispersion, fields[13])


@record(frozen=True)
class Source:
    """One time source, from chronyc or ntpq. ``reach`` is the 8-bit reach register: bit 0
    is the most recent poll (RFC 5905 section 9.2; chronyc and ntpq print it in octal)."""

    name: str
    mode: str
    state: str
    stratum: int
    poll: int
    reach: int
    offset_s: Optional[float]

    @property
    def selected(self) -> bool:
        return self.state == "*"


# chronyc(1) "sources": M = ^ server, = peer, # reference clock; S = * selected,
# + combined, - not combined, ? unreachable/unusable, x falseticker, ~ too variable.
_CHRONY_MODES = "^=#"
_CHRONY_STATES = "*+-?x~"


def parse_chrony_sources(text: str) -> Union[List[Source], Unparsable]:
    """`chronyc -c sources`: mode, state, name, stratum, poll, reach (octal), last rx,
    adjusted offset, measured offset, error. No sources configured = empty output."""
    sources: List[Source] = []
    for line in _clean(text).splitlines():
        if not line.strip():
            continue
        f = line.split(",")
        if len(f) != 10 or f[0] not in _CHRONY_MODES or f[1] not in _CHRONY_STATES:
            return Unparsable(f"unrecognised source line: {_excerpt(line)}")
        stratum = _uint(f[3])
        if not re.fullmatch(r"[0-7]{1,3}", f[5]) or stratum is None:
            return Unparsable(f"bad stratum or reach register: {_excerpt(line)}")
        poll = _uint(f[4][1:] if f[4].startswith("-") else f[4], 4)
        if poll is None or _float(f[7]) is None:
            return Unparsable(f"bad poll or offset: {_excerpt(line)}")
        reach = int(f[5], 8)
        if reach > 0o377:
            return Unparsable(f"reach register wider than 8 bits: {_excerpt(line)}")
        sources.append(
            Source(f[2], f[0], f[1], stratum, -poll if f[4].startswith("-") else poll, reach,
                   _float(f[7]))
        )
    return sources


# -- ntpd / ntpsec ------------------------------------------------------------------------
_NTPQ_HEADER = re.compile(r"^\s*remote\s+refid\s+st\s+t\s+when\s+poll\s+reach\s+delay\s+offset")


def parse_ntpq_peers(text: str) -> Union[List[Source], Unparsable]:
    """`ntpq -pn`: a header, a ==== rule, then one line per association whose first
    character is the tally code (ntpq(1), "peers": * system peer, o PPS peer, + candidate,
    - outlier, x falseticker, space rejected). Offset is in milliseconds."""
    lines = _clean(text).splitlines()
    start = next((i for i, ln in enumerate(lines) if _NTPQ_HEADER.match(ln)), None)
    if start is None:
        return Unparsable(f"no ntpq peers header: {_excerpt(text)}")
    peers: List[Source] = []
    for line in lines[start + 1:]:
        if not line.strip() or line.startswith("="):
            continue
        tally, fields = line[0], line[1:].split()
        if len(fields) < 10 or tally not in " *o+-x.#":
            return Unparsable(f"unrecognised peer line: {_excerpt(line)}")
        remote, refid, stratum, _kind, _when, poll, reach, _delay, offset = fields[:9]
        st = _uint(stratum)
        if st is None or not re.fullmatch(r"[0-7]{1,3}", reach):
            return Unparsable(f"bad stratum or reach register: {_excerpt(line)}")
        off_ms = _float(offset)
        if off_ms is None or _uint(poll.rstrip("smhd"), 12) is None:
            return Unparsable(f"bad poll or offset: {_excerpt(line)}")
        state = "*" if tally in "*o" else tally
        mode = "#" if remote.startswith("127.127.") else "^"  # 127.127.t.u = ntpd refclock
        peers.append(
            Source(f"{remote} ({refid})", mode, state, st, 0, int(reach, 8) & 0o377,
                   off_ms / 1000.0)
        )
    return peers


def ntpq_local_clock(source: Source) -> bool:
    # ntpd's undisciplined local clock driver: 127.127.1.x with refid .LOCL. (ntpd refclock
    # type 1, "Undisciplined Local Clock").
    return source.name.startswith("127.127.1.") or "(.LOCL.)" in source.name


# -- systemd-timesyncd --------------------------------------------------------------------
def parse_key_values(text: str) -> Dict[str, str]:
    """`timedatectl show`: KEY=value lines (anything else ignored)."""
    out: Dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", key):
            out[key] = value.strip()
    return out


_SPAN_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0,
               "h": 3600.0, "d": 86400.0}
_SPAN_PART = re.compile(r"(?a)(\d{1,15}(?:\.\d{1,15})?)(ns|us|µs|ms|min|s|h|d)")


def parse_timespan(text: str) -> Optional[float]:
    """systemd's format_timespan() ("+1.234ms", "-1min 2.5s") in seconds, or None."""
    text = text.strip()
    sign = -1.0 if text.startswith("-") else 1.0
    body = text.lstrip("+-").strip()
    parts = body.split()
    if not parts:
        return None
    total = 0.0
    for part in parts:
        m = _SPAN_PART.fullmatch(part)
        if not m:
            return None
        total += float(m.group(1)) * _SPAN_UNITS[m.group(2)]
    return sign * total


@record(frozen=True)
class TimesyncStatus:
    server: str
    leap: str
    stratum: Optional[int]
    offset_s: Optional[float]
    packets: Optional[int]


def parse_timesync_status(text: str) -> Union[TimesyncStatus, Unparsable]:
    """`timedatectl timesync-status`: "   Key: value" lines (systemd timedatectl.c,
    print_ntp_status_info); Offset/Stratum appear only once a packet has been received."""
    fields: Dict[str, str] = {}
    for line in _clean(text).splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip():
            fields[key.strip()] = value.strip()
    if "Server" not in fields:
        return Unparsable(f"no 'Server:' line: {_excerpt(text)}")
    stratum = fields.get("Stratum", "")
    packets = fields.get("Packet count", "")
    offset = parse_timespan(fields["Offset"]) if "Offset" in fields else None
    if "Offset" in fields and offset is None:
        return Unparsable(f"bad Offset: {fields['Offset'][:40]!r}")
    return TimesyncStatus(
        fields["Server"], fields.get("Leap", ""), _uint(stratum), offset, _uint(packets, 20),
    )


# -- the kernel (adjtimex) ----------------------------------------------------------------
# <linux/timex.h> status bits and clock states.
STA_BITS: Tuple[Tuple[int, str], ...] = (
    (0x0001, "STA_PLL"), (0x0002, "STA_PPSFREQ"), (0x0004, "STA_PPSTIME"),
    (0x0008, "STA_FLL"), (0x0010, "STA_INS"), (0x0020, "STA_DEL"), (0x0040, "STA_UNSYNC"),
    (0x0080, "STA_FREQHOLD"), (0x0100, "STA_PPSSIGNAL"), (0x0200, "STA_PPSJITTER"),
    (0x0400, "STA_PPSWANDER"), (0x0800, "STA_PPSERROR"), (0x1000, "STA_CLOCKERR"),
    (0x2000, "STA_NANO"), (0x4000, "STA_MODE"), (0x8000, "STA_CLK"),
)
STA_UNSYNC = 0x0040
CLOCK_STATES = ("TIME_OK", "TIME_INS", "TIME_DEL", "TIME_OOP", "TIME_WAIT", "TIME_ERROR")
# The kernel caps maxerror at NTP_PHASE_LIMIT (16 s) and then sets STA_UNSYNC
# (kernel/time/ntp.c); systemd's ntp_synced() (timedatectl's NTPSynchronized) also treats
# maxerror >= 16 s as not synchronised.
MAXERROR_LIMIT_US = 16_000_000


@record(frozen=True)
class KernelTime:
    state: str
    flags: List[str]
    maxerror_us: int
    esterror_us: int
    offset_s: float

    @property
    def synchronised(self) -> bool:
        return "STA_UNSYNC" not in self.flags and self.maxerror_us < MAXERROR_LIMIT_US

    def details(self) -> Dict[str, Any]:
        return {"state": self.state, "flags": self.flags,
                "maxerror_ms": round(self.maxerror_us / 1000.0, 3),
                "esterror_ms": round(self.esterror_us / 1000.0, 3),
                "offset_s": self.offset_s, "synchronised": self.synchronised}


def parse_adjtimex(fact: Any) -> Union[KernelTime, Unparsable, None]:
    """The host.json `adjtimex` fact (agent.host.live.adjtimex); None when not captured."""
    if fact is None:
        return None
    if not isinstance(fact, Mapping):
        return Unparsable(f"adjtimex fact is a {type(fact).__name__}, not a mapping")
    vals = [fact.get(k) for k in ("state", "status", "maxerror_us", "esterror_us")]
    # struct timex fields are C longs (<linux/timex.h>): a value past 64 bits is not one.
    if not all(isinstance(v, int) and not isinstance(v, bool) and abs(v) < 2**63 for v in vals):
        return Unparsable("adjtimex fact lacks integer state/status/maxerror_us/esterror_us")
    state, status, maxerror, esterror = (int(v) for v in vals if isinstance(v, int))
    offset = fact.get("offset_ns", 0)
    offset_s = 0.0
    if isinstance(offset, (int, float)) and not isinstance(offset, bool) and abs(offset) < 2**63:
        offset_s = offset / 1e9 if math.isfinite(offset) else 0.0
    name = CLOCK_STATES[state] if 0 <= state < len(CLOCK_STATES) else f"state {state}"
    return KernelTime(name, [n for bit, n in STA_BITS if status & bit], maxerror, esterror,
                      offset_s)
