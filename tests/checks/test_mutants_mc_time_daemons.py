"""checks/time/daemons.py, each judge on hand-built daemon answers: the verdict, its failure
code, the exact summary and the details a user reads.

Expected values are written by hand from docs/time-sync.md and the tools' documented output:
`timedatectl timesync-status` "Key: value" lines (systemd timedatectl.c print_ntp_status_info),
`timedatectl show` KEY=value (NTPSynchronized=yes|no), `ntpq -pn` peers (ntpq(1): tally code,
reach in octal, offset in ms), `chronyc -c sources` CSV (chronyc(1)), and the kernel's
adjtimex state (STA_UNSYNC 0x40, maxerror limit 16 s, kernel/time/ntp.c).
"""
from typing import Any, Dict, List, Optional

import pytest

from agent.hostview import CommandResult
from agent.model import Outcome, Status
from checks.time.daemons import (
    Settings,
    _kernel_why,
    _offset_verdict,
    _recent,
    _selected_source,
    fmt_seconds,
    judge_chrony,
    judge_kernel,
    judge_ntpd,
    judge_ptp,
    judge_timesyncd,
    sources_text,
)
from checks.time.parsers import KernelTime, Source, Unparsable

DEFAULT = Settings(0.1, 1.0, None, 4)
STATUS = ("timedatectl", "timesync-status")
SHOW = ("timedatectl", "show")
NTPQ = ("ntpq", "-pn")
TRACKING = ("chronyc", "-c", "tracking")
SOURCES = ("chronyc", "-c", "sources")


def ok(argv, stdout: str) -> CommandResult:
    return CommandResult(tuple(argv), 0, stdout, "")


def refused(argv, stdout: str = "") -> CommandResult:
    return CommandResult(tuple(argv), 1, stdout, "Failed to connect to bus")


def timesync(server: str = "10.0.0.1 (ntp.example.internal)", leap: str = "normal",
             stratum: Optional[str] = "2", offset: Optional[str] = "-250ms",
             packets: Optional[str] = "118") -> CommandResult:
    lines = [f"       Server: {server}", f"         Leap: {leap}"]
    if stratum is not None:
        lines.append(f"      Stratum: {stratum}")
    if offset is not None:
        lines.append(f"       Offset: {offset}")
    if packets is not None:
        lines.append(f" Packet count: {packets}")
    return ok(STATUS, "\n".join(lines) + "\n")


def kernel(flags: List[str], maxerror_us: int = 4500, offset_s: float = 0.0) -> KernelTime:
    return KernelTime("TIME_OK", flags, maxerror_us, 0, offset_s)


SYNCED_K = kernel(["STA_PLL", "STA_NANO"])
UNSYNCED_K = kernel(["STA_UNSYNC", "STA_NANO"])
SRV = "10.0.0.1 (ntp.example.internal)"


def ts_details(**over: Any) -> Dict[str, Any]:
    base = {"daemon": "timesyncd", "source": SRV, "stratum": 2, "offset_s": -0.25,
            "leap": "normal", "packets": 118, "kernel_synchronised": True}
    base.update(over)
    return base


# -- fmt_seconds and the offset verdict ---------------------------------------------------------
@pytest.mark.parametrize("value, text", [
    (0.0, "+0.0 us"),
    (0.0000005, "+0.5 us"),
    (-0.0009, "-900.0 us"),
    (0.001, "+1.0 ms"),        # 1 ms is no longer shown in microseconds
    (-0.25, "-250.0 ms"),
    (0.999, "+999.0 ms"),
    (1.0, "+1.000 s"),         # 1 s is no longer shown in milliseconds
    (-2.5, "-2.500 s"),
])
def test_offsets_are_shown_in_the_unit_of_their_size(value, text):
    assert fmt_seconds(value) == text


@pytest.mark.parametrize("offset, status, code, summary", [
    (None, Status.PASS, None, "X"),
    (0.05, Status.PASS, None, "X, offset +50.0 ms"),
    (-0.1, Status.WARN, "offset-over-warning",
     "X, offset -100.0 ms over the warning limit 0.1 s"),
    (0.5, Status.WARN, "offset-over-warning", "X, offset +500.0 ms over the warning limit 0.1 s"),
    (1.0, Status.FAIL, "offset-over-limit", "X, but the clock is off by +1.000 s (limit 1 s)"),
    (-3.0, Status.FAIL, "offset-over-limit", "X, but the clock is off by -3.000 s (limit 1 s)"),
])
def test_offset_verdict_at_and_past_each_limit(offset, status, code, summary):
    assert _offset_verdict("X", offset, DEFAULT, {"k": 1}) == Outcome(
        status, summary, {"k": 1}, code=code)


def test_offset_limits_are_printed_as_configured():
    s = Settings(0.25, 2.5, None, 4)
    assert _offset_verdict("X", 0.3, s, {}).summary == (
        "X, offset +300.0 ms over the warning limit 0.25 s")
    assert _offset_verdict("X", 2.5, s, {}).summary == (
        "X, but the clock is off by +2.500 s (limit 2.5 s)")


# -- sources and the reach window ---------------------------------------------------------------
def src(name: str, state: str = "*", reach: int = 0o377, stratum: int = 2,
        offset: Optional[float] = 0.001) -> Source:
    return Source(name, "^", state, stratum, 6, reach, offset)


@pytest.mark.parametrize("reach, polls, recent", [
    (0o377, 4, True), (0o001, 4, True), (0o010, 4, True), (0o020, 4, False),
    (0o300, 4, False), (0o000, 4, False), (0o020, 5, True), (0o001, 1, True), (0o002, 1, False),
])
def test_a_source_is_recent_while_a_reply_is_in_the_last_polls(reach, polls, recent):
    assert _recent(src("a", reach=reach), Settings(0.1, 1.0, None, polls)) is recent


def test_sources_text_names_state_words_and_octal_reach():
    assert sources_text([]) == "no sources configured"
    assert sources_text([src("a", "*", 0o377), src("b", "?", 0), src("c", "x", 0o17),
                         src("d", " ", 0o1)]) == (
        "a selected, reach 377; b unreachable, reach 000; c falseticker, reach 017; "
        "d rejected, reach 001")
    assert sources_text([src("e", "+", 8), src("f", "-", 9), src("g", "~", 10),
                         src("h", "o", 11)]) == (
        "e combined, reach 010; f not combined, reach 011; g too variable, reach 012; "
        "h o, reach 013")


def test_sources_text_shows_four_and_counts_the_rest():
    five = [src(f"s{i}", "+") for i in range(5)]
    assert sources_text(five) == "; ".join(f"s{i} combined, reach 377" for i in range(4)) + (
        ", +1 more")
    four = five[:4]
    assert sources_text(four) == "; ".join(f"s{i} combined, reach 377" for i in range(4))


def test_selected_source_is_the_first_starred_one():
    a, b = src("a", "+"), src("b", "*")
    assert _selected_source("chrony", [a, b, src("c", "*")], DEFAULT, {}) == b


def test_no_selected_source_fails_naming_the_sources():
    out = _selected_source("ntpd", [src("a", "+", 0o17)], DEFAULT, {"d": 1})
    assert out == Outcome(Status.FAIL, "ntpd has no selected source (a combined, reach 017)",
                          {"d": 1}, code="no-reachable-source")


def test_a_silent_selected_source_fails_with_its_reach():
    out = _selected_source("chrony", [src("a", "*", 0o360)], Settings(0.1, 1.0, None, 4), {})
    assert out == Outcome(
        Status.FAIL, "chrony's selected source a has not answered in its last 4 polls "
        "(reach 360)", {}, code="no-reachable-source")


# -- chrony -------------------------------------------------------------------------------------
TRACK = ("0A000001,ntp1,3,1795962210.027905305,{off},-0.000000010,0.000000049,0.002,-0.000,"
         "0.035,0.000005059,0.000000988,0.3,{leap}\n")


def chrony(off: str = "0.000200000", leap: str = "Normal", refid: str = "0A000001",
           name: str = "ntp1",
           sources: str = "^,*,ntp1,2,6,377,10,0.000200000,0.000200000,0.000010000\n"):
    tracking = TRACK.format(off=off, leap=leap).replace("0A000001,ntp1", f"{refid},{name}")
    return ok(TRACKING, tracking), ok(SOURCES, sources)


def chrony_details(**over: Any) -> Dict[str, Any]:
    base = {"daemon": "chrony", "source": "ntp1", "refid": "0A000001", "stratum": 3,
            "offset_s": 0.0002, "leap": "Normal", "root_dispersion_s": 0.000000988,
            "sources": [{"name": "ntp1", "state": "*", "stratum": 2, "reach": "377",
                         "offset_s": 0.0002}], "reach_polls": 4}
    base.update(over)
    return base


def test_chrony_synchronised_passes_with_every_detail():
    out = judge_chrony(*chrony(), DEFAULT)
    assert out == Outcome(Status.PASS, "chrony synchronised to ntp1 (stratum 3), offset +200.0 us",
                          chrony_details())


def test_chrony_not_synchronised_fails():
    out = judge_chrony(*chrony(leap="Not synchronised"), DEFAULT)
    assert out == Outcome(Status.FAIL, "chrony is not synchronised (ntp1 selected, reach 377)",
                          chrony_details(leap="Not synchronised"), code="unsynchronised")


def test_chrony_local_reference_warns():
    out = judge_chrony(*chrony(refid="7F7F0101", name=""), DEFAULT)
    assert out == Outcome(
        Status.WARN, "chrony is synchronised only to this host's own clock (local stratum 3, "
        "reference 7F7F0101); sources: ntp1 selected, reach 377",
        chrony_details(source=None, refid="7F7F0101"), code="local-clock-only")


def test_chrony_sources_that_fail_or_do_not_parse_are_unknown():
    tracking, _ = chrony()
    out = judge_chrony(tracking, refused(SOURCES), DEFAULT)
    assert out == Outcome(Status.UNKNOWN, "cannot list chrony's sources: `chronyc -c sources` "
                          "exited 1: Failed to connect to bus", {"daemon": "chrony"},
                          code="daemon-unreadable")
    out = judge_chrony(tracking, ok(SOURCES, "garbage\n"), DEFAULT)
    assert out == Outcome(Status.UNKNOWN, "unrecognised `chronyc -c sources` output: "
                          "unrecognised source line: 'garbage'", {"daemon": "chrony"},
                          code="daemon-unreadable")
    out = judge_chrony(ok(TRACKING, "x\n"), ok(SOURCES, ""), DEFAULT)
    assert out == Outcome(Status.UNKNOWN, "unrecognised `chronyc -c tracking` output: "
                          "expected 14 CSV fields, got 1: 'x'", {"daemon": "chrony"},
                          code="daemon-unreadable")


# -- systemd-timesyncd --------------------------------------------------------------------------
def test_timesyncd_synchronised_passes_with_every_detail():
    out = judge_timesyncd(timesync(), ok(SHOW, "NTPSynchronized=yes\n"), None, DEFAULT)
    assert out == Outcome(
        Status.WARN,
        f"systemd-timesyncd synchronised to {SRV} (stratum 2), offset -250.0 ms over the "
        "warning limit 0.1 s", ts_details(), code="offset-over-warning")
    small = judge_timesyncd(timesync(offset="+1.5ms"), ok(SHOW, "NTPSynchronized=yes\n"), None,
                            DEFAULT)
    assert small == Outcome(Status.PASS, f"systemd-timesyncd synchronised to {SRV} (stratum 2), "
                            "offset +1.5 ms", ts_details(offset_s=0.0015))


def test_timesyncd_unreadable_status_is_unknown():
    out = judge_timesyncd(ok(STATUS, "garbage\n"), ok(SHOW, ""), None, DEFAULT)
    assert out == Outcome(Status.UNKNOWN, "unrecognised `timedatectl timesync-status` output: "
                          "no 'Server:' line: 'garbage'", {"daemon": "timesyncd"},
                          code="daemon-unreadable")


@pytest.mark.parametrize("kern, show, kernel_sync", [
    (None, ok(SHOW, "NTPSynchronized=yes\n"), True),
    (None, ok(SHOW, "NTP=yes\n"), None),                    # no NTPSynchronized line
    (None, ok(SHOW, "NTPSynchronized=maybe\n"), None),
    (None, refused(SHOW, "NTPSynchronized=no\n"), None),     # a failed `show` is not read
    (Unparsable("bad"), ok(SHOW, "NTPSynchronized=yes\n"), True),
    (SYNCED_K, ok(SHOW, "NTPSynchronized=no\n"), True),      # the kernel state wins
])
def test_timesyncd_kernel_state_from_the_kernel_else_timedatectl(kern, show, kernel_sync):
    out = judge_timesyncd(timesync(offset="+1.5ms"), show, kern, DEFAULT)
    assert out.status == Status.PASS
    assert out.details["kernel_synchronised"] is kernel_sync


@pytest.mark.parametrize("kern, show", [
    (None, ok(SHOW, "NTPSynchronized=no\n")),
    (UNSYNCED_K, ok(SHOW, "NTPSynchronized=yes\n")),
    (kernel(["STA_PLL"], maxerror_us=16_000_000), ok(SHOW, "NTPSynchronized=yes\n")),
])
def test_timesyncd_with_an_unsynchronised_kernel_fails(kern, show):
    out = judge_timesyncd(timesync(), show, kern, DEFAULT)
    assert out == Outcome(
        Status.FAIL, f"systemd-timesyncd has server {SRV} but the kernel clock is not "
        "synchronised (no update for hours, or never)", ts_details(kernel_synchronised=False),
        code="unsynchronised")


@pytest.mark.parametrize("server, packets, shown", [
    ("", "118", "none"),
    ("n/a", "118", "n/a"),
    ("null", "5", "null"),
    ("10.0.0.1", "0", "10.0.0.1"),
    ("10.0.0.1", None, "10.0.0.1"),
])
def test_timesyncd_without_a_reply_fails(server, packets, shown):
    out = judge_timesyncd(timesync(server=server, packets=packets),
                          ok(SHOW, "NTPSynchronized=yes\n"), None, DEFAULT)
    assert out.status == Status.FAIL and out.code == "no-reachable-source"
    assert out.summary == f"systemd-timesyncd has no reply from any server (server {shown})"
    assert out.details["source"] == server
    assert out.details["packets"] == (None if packets is None else int(packets))


@pytest.mark.parametrize("leap, stratum", [
    ("not synchronized", "2"), ("normal", "16"), ("normal", "0"),
])
def test_timesyncd_server_not_synchronised_itself_fails(leap, stratum):
    out = judge_timesyncd(timesync(leap=leap, stratum=stratum),
                          ok(SHOW, "NTPSynchronized=yes\n"), None, DEFAULT)
    assert out == Outcome(Status.FAIL,
                          f"systemd-timesyncd's server {SRV} is not synchronised itself",
                          ts_details(leap=leap, stratum=int(stratum)), code="unsynchronised")


def test_timesyncd_normal_leap_and_stratum_one_pass():
    out = judge_timesyncd(timesync(stratum="1", offset=None), ok(SHOW, "NTPSynchronized=yes\n"),
                          None, DEFAULT)
    assert out == Outcome(Status.PASS, f"systemd-timesyncd synchronised to {SRV} (stratum 1)",
                          ts_details(stratum=1, offset_s=None))


# -- ntpd ---------------------------------------------------------------------------------------
NTPQ_HEAD = ("     remote           refid      st t when poll reach   delay   offset  jitter\n"
             "==============================================================================\n")


def ntpq(*rows: str) -> CommandResult:
    return ok(NTPQ, NTPQ_HEAD + "".join(r + "\n" for r in rows))


PEER = "*10.20.0.5      10.9.9.9         2 u   30   64  377    0.513    0.300   0.248"
LOCAL = "*127.127.1.0    .LOCL.          10 l   30   64  377    0.000    0.000   0.000"
CAND = "+10.20.0.6      10.9.9.9         3 u   30   64   17    0.513   -1.500   0.248"


def test_ntpd_synchronised_passes_with_the_selected_peer_in_details():
    out = judge_ntpd(ntpq(CAND, PEER), DEFAULT)
    sources = [
        {"name": "10.20.0.6 (10.9.9.9)", "state": "+", "stratum": 3, "reach": "017",
         "offset_s": -0.0015},
        {"name": "10.20.0.5 (10.9.9.9)", "state": "*", "stratum": 2, "reach": "377",
         "offset_s": 0.0003},
    ]
    assert out == Outcome(
        Status.PASS, "ntpd synchronised to 10.20.0.5 (10.9.9.9) (stratum 2), offset +300.0 us",
        {"daemon": "ntpd", "sources": sources, "reach_polls": 4, "source": "10.20.0.5 (10.9.9.9)",
         "stratum": 2, "offset_s": 0.0003})


def test_ntpd_on_its_local_clock_warns():
    out = judge_ntpd(ntpq(LOCAL), DEFAULT)
    name = "127.127.1.0 (.LOCL.)"
    assert out == Outcome(
        Status.WARN, f"ntpd is synchronised only to this host's own clock ({name})",
        {"daemon": "ntpd", "sources": [{"name": name, "state": "*", "stratum": 10,
                                        "reach": "377", "offset_s": 0.0}],
         "reach_polls": 4, "source": name, "stratum": 10, "offset_s": 0.0},
        code="local-clock-only")


def test_ntpd_without_a_system_peer_fails_with_details():
    out = judge_ntpd(ntpq(CAND), DEFAULT)
    assert out == Outcome(
        Status.FAIL, "ntpd has no selected source (10.20.0.6 (10.9.9.9) combined, reach 017)",
        {"daemon": "ntpd", "sources": [{"name": "10.20.0.6 (10.9.9.9)", "state": "+",
                                        "stratum": 3, "reach": "017", "offset_s": -0.0015}],
         "reach_polls": 4}, code="no-reachable-source")


def test_ntpd_unreadable_peers_are_unknown():
    out = judge_ntpd(ok(NTPQ, "garbage\n"), DEFAULT)
    assert out == Outcome(Status.UNKNOWN, "unrecognised `ntpq -pn` output: no ntpq peers "
                          "header: 'garbage'", {"daemon": "ntpd"}, code="daemon-unreadable")


# -- PTP ----------------------------------------------------------------------------------------
def test_ptp_and_kernel_maxerror_is_shown_in_milliseconds_rounded():
    k = kernel(["STA_PLL"], maxerror_us=2551)  # 2.551 ms
    assert judge_ptp(k, ["ptp4l"], DEFAULT).summary == (
        "PTP (ptp4l) keeps the kernel clock synchronised (maxerror 2.6 ms), offset +0.0 us")
    assert judge_kernel(k, ok(SHOW, ""), [], DEFAULT).summary == (
        "no time daemon answered; the kernel reports the clock synchronised (maxerror 2.6 ms "
        "< 16 s), offset +0.0 us")


def test_ptp_with_a_synchronised_kernel_passes():
    out = judge_ptp(kernel(["STA_PLL"], maxerror_us=2500, offset_s=0.0004), ["phc2sys", "ptp4l"],
                    DEFAULT)
    assert out == Outcome(
        Status.PASS, "PTP (phc2sys/ptp4l) keeps the kernel clock synchronised (maxerror 2.5 ms), "
        "offset +400.0 us",
        {"daemon": "ptp", "processes": ["phc2sys", "ptp4l"], "offset_s": 0.0004})


@pytest.mark.parametrize("k, why", [
    (UNSYNCED_K, "STA_UNSYNC set"),
    (kernel(["STA_PLL"], maxerror_us=16_000_000), "maxerror 16.0 s >= 16 s"),
    (kernel(["STA_PLL"], maxerror_us=17_300_000), "maxerror 17.3 s >= 16 s"),
    (kernel(["STA_PLL"], maxerror_us=16_050_010), "maxerror 16.1 s >= 16 s"),  # 16.05001 s
])
def test_ptp_with_an_unsynchronised_kernel_fails_saying_why(k, why):
    out = judge_ptp(k, ["ptp4l"], DEFAULT)
    assert out == Outcome(
        Status.FAIL, f"PTP (ptp4l) running but the kernel clock is not synchronised ({why})",
        {"daemon": "ptp", "processes": ["ptp4l"], "offset_s": 0.0}, code="unsynchronised")
    assert _kernel_why(k) == why


def test_ptp_without_a_readable_kernel_state_is_unknown():
    out = judge_ptp(Unparsable("adjtimex fact is a str, not a mapping"), ["phc2sys"], DEFAULT)
    assert out == Outcome(
        Status.UNKNOWN, "PTP (phc2sys) running; kernel clock state unreadable: adjtimex fact is "
        "a str, not a mapping", {"daemon": "ptp", "processes": ["phc2sys"], "offset_s": None},
        code="nothing-recorded")
    out = judge_ptp(None, ["phc2sys"], DEFAULT)
    assert out == Outcome(
        Status.UNKNOWN, "PTP (phc2sys) running; the kernel's clock state was not captured",
        {"daemon": "ptp", "processes": ["phc2sys"], "offset_s": None}, code="nothing-recorded")


# -- the kernel alone ---------------------------------------------------------------------------
TRIED = ["`chronyc` not installed", "`timedatectl` not installed", "`ntpq` not installed",
         "fourth"]


def test_kernel_alone_synchronised_passes():
    out = judge_kernel(kernel(["STA_PLL"], maxerror_us=4500, offset_s=-0.002), ok(SHOW, ""),
                       TRIED[:1], DEFAULT)
    assert out == Outcome(
        Status.PASS, "no time daemon answered; the kernel reports the clock synchronised "
        "(maxerror 4.5 ms < 16 s), offset -2.0 ms",
        {"daemon": None, "tried": TRIED[:1], "offset_s": -0.002})


def test_kernel_alone_unsynchronised_fails():
    out = judge_kernel(UNSYNCED_K, ok(SHOW, "NTPSynchronized=yes\n"), TRIED[:1], DEFAULT)
    assert out == Outcome(
        Status.FAIL, "no time daemon answered and the kernel clock is not synchronised "
        "(STA_UNSYNC set)", {"daemon": None, "tried": TRIED[:1], "offset_s": 0.0},
        code="no-daemon")


def test_kernel_unreadable_is_unknown():
    out = judge_kernel(Unparsable("bad"), ok(SHOW, "NTPSynchronized=yes\n"), [], DEFAULT)
    assert out == Outcome(Status.UNKNOWN, "no time daemon answered; kernel clock state "
                          "unreadable: bad", {"daemon": None, "tried": [], "offset_s": None},
                          code="nothing-recorded")


def test_without_the_kernel_state_timedatectl_decides():
    details = {"daemon": None, "tried": [], "offset_s": None}
    assert judge_kernel(None, ok(SHOW, "NTPSynchronized=yes\n"), [], DEFAULT) == Outcome(
        Status.PASS, "no time daemon answered; timedatectl reports NTPSynchronized=yes", details)
    assert judge_kernel(None, ok(SHOW, "NTPSynchronized=no\n"), [], DEFAULT) == Outcome(
        Status.FAIL, "no time daemon answered and timedatectl reports NTPSynchronized=no",
        details, code="no-daemon")
    # A `show` that failed is not read even when its stdout says yes.
    out = judge_kernel(None, refused(SHOW, "NTPSynchronized=yes\n"), TRIED, DEFAULT)
    assert out == Outcome(
        Status.UNKNOWN, "no time daemon answered and the kernel's clock state was not captured "
        "(`chronyc` not installed; `timedatectl` not installed; `ntpq` not installed)",
        {"daemon": None, "tried": TRIED, "offset_s": None}, code="nothing-recorded")


def test_chrony_without_a_selected_or_recent_source_fails_with_details():
    sources = "^,+,ntp1,2,6,377,10,0.000200000,0.000200000,0.000010000\n"
    out = judge_chrony(*chrony(sources=sources), DEFAULT)
    assert out == Outcome(
        Status.FAIL, "chrony has no selected source (ntp1 combined, reach 377)",
        chrony_details(sources=[{"name": "ntp1", "state": "+", "stratum": 2, "reach": "377",
                                 "offset_s": 0.0002}]), code="no-reachable-source")
    silent = _selected_source("chrony", [src("a", "*", 0o360)], DEFAULT, {"d": 1})
    assert isinstance(silent, Outcome) and silent.details == {"d": 1}
