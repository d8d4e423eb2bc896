"""checks/time/parsers.py: each parser's value on well-formed lines, and the exact reason it
gives for each way a line is refused (the reason is the user's summary of an `unknown`).

Line formats written by hand from the tools' documentation: `chronyc -c tracking` (14 CSV
fields, chronyc(1) "tracking"), `chronyc -c sources` (10 CSV fields, reach in octal),
`ntpq -pn` (ntpq(1) "peers": tally code, 10 columns, offset in ms), `timedatectl show`
(KEY=value), `timedatectl timesync-status` ("Key: value", systemd timedatectl.c) and
systemd's format_timespan() units, and <linux/timex.h> for the adjtimex status bits/states.
"""
from typing import Any

import pytest

from checks.time import parsers
from checks.time.parsers import (
    ChronyTracking,
    KernelTime,
    Source,
    TimesyncStatus,
    Unparsable,
)

FIELDS = ["0A000001", "ntp1", "3", "1795962210.027905305", "-0.000001376", "-0.000000010",
          "0.000000049", "0.002", "-0.000", "0.035", "0.000005059", "0.000000988", "0.3",
          "Normal"]


def tracking(**at: str) -> str:
    f = list(FIELDS)
    for i, v in at.items():
        f[int(i[1:])] = v
    return ",".join(f) + "\n"


# -- chronyc -c tracking ------------------------------------------------------------------------
def test_chrony_tracking_fields():
    assert parsers.parse_chrony_tracking("\n  \n" + tracking() + "\n") == ChronyTracking(
        "0A000001", "ntp1", 3, -0.000001376, 0.000005059, 0.000000988, "Normal")


def test_chrony_tracking_reference_id_is_upper_cased():
    got = parsers.parse_chrony_tracking(tracking(f0="7f7f0101", f1=""))
    assert isinstance(got, ChronyTracking) and got.refid == "7F7F0101"
    assert got.local_only and got.synchronised


def test_chrony_tracking_ignores_the_fields_it_does_not_read():
    text = tracking(f3="x", f5="x", f6="x", f7="x", f8="x", f9="x", f12="x")
    assert parsers.parse_chrony_tracking(text) == ChronyTracking(
        "0A000001", "ntp1", 3, -0.000001376, 0.000005059, 0.000000988, "Normal")


@pytest.mark.parametrize("text, reason", [
    ("", "expected one CSV line, got 0: ''"),
    (tracking() * 2, "expected one CSV line, got 2: " + repr((tracking() * 2).strip()[:60])),
    ("a,b\n", "expected 14 CSV fields, got 2: 'a,b'"),
    (tracking() .rstrip("\n") + ",extra\n",
     "expected 14 CSV fields, got 15: " + repr(tracking().strip()[:60])),
    ("\ud800\n", "expected 14 CSV fields, got 1: '?'"),  # a lone surrogate printed as "?"
    (tracking(f0="0A00000G"), "bad reference ID or stratum: " + repr(tracking(f0="0A00000G")
                                                                     .strip()[:60])),
    (tracking(f0="0A0000011"), "bad reference ID or stratum: " + repr(
        tracking(f0="0A0000011").strip()[:60])),
    (tracking(f2="x"), "bad reference ID or stratum: " + repr(tracking(f2="x").strip()[:60])),
    (tracking(f2="1234567890"), "bad reference ID or stratum: " + repr(
        tracking(f2="1234567890").strip()[:60])),
    (tracking(f2="²"), "bad reference ID or stratum: " + repr(tracking(f2="²").strip()[:60])),
])
def test_chrony_tracking_refusals_say_why(text, reason):
    assert parsers.parse_chrony_tracking(text) == Unparsable(reason)


@pytest.mark.parametrize("field, value", [
    ("f4", "nan"), ("f4", "x"), ("f10", "inf"), ("f10", "x"), ("f11", "-inf"), ("f11", "x"),
    ("f13", "Sideways"), ("f13", "normal"),
])
def test_chrony_tracking_bad_numbers_or_leap_status(field, value):
    text = tracking(**{field: value})
    assert parsers.parse_chrony_tracking(text) == Unparsable(
        "bad offset, root delay/dispersion or leap status: " + repr(text.strip()[:60]))


def test_chrony_tracking_nine_digit_stratum_is_read():
    got = parsers.parse_chrony_tracking(tracking(f2="123456789"))
    assert isinstance(got, ChronyTracking) and got.stratum == 123456789


@pytest.mark.parametrize("leap", ["Normal", "Insert second", "Delete second"])
def test_chrony_is_synchronised_unless_leap_says_not_or_no_reference(leap):
    got = parsers.parse_chrony_tracking(tracking(f13=leap))
    assert isinstance(got, ChronyTracking) and got.synchronised and not got.local_only
    unsync = parsers.parse_chrony_tracking(tracking(f13="Not synchronised"))
    assert isinstance(unsync, ChronyTracking) and not unsync.synchronised
    noref = parsers.parse_chrony_tracking(tracking(f0="00000000", f13=leap))
    assert isinstance(noref, ChronyTracking) and not noref.synchronised


# -- chronyc -c sources -------------------------------------------------------------------------
def test_chrony_sources_fields():
    text = ("^,*,ntp1,2,6,377,12,0.000200000,0.1,0.2\n\n"
            "=,+,peer,3,-4,17,x,-0.5,x,x\n"
            "#,x,PPS0,0,1234,0,0,1e-3,0,0\n")
    assert parsers.parse_chrony_sources(text) == [
        Source("ntp1", "^", "*", 2, 6, 0o377, 0.0002),
        Source("peer", "=", "+", 3, -4, 0o17, -0.5),
        Source("PPS0", "#", "x", 0, 1234, 0, 0.001),
    ]


@pytest.mark.parametrize("line, reason", [
    ("^,*,a,2,6,377,0,0,0", "unrecognised source line"),
    ("^,*,a,2,6,377,0,0,0,0,0", "unrecognised source line"),
    ("!,*,a,2,6,377,0,0,0,0", "unrecognised source line"),
    ("^,!,a,2,6,377,0,0,0,0", "unrecognised source line"),
    ("^,*,a,x,6,377,0,0,0,0", "bad stratum or reach register"),
    ("^,*,a,2,6,8,0,0,0,0", "bad stratum or reach register"),
    ("^,*,a,2,6,1777,0,0,0,0", "bad stratum or reach register"),
    ("^,*,a,2,6,,0,0,0,0", "bad stratum or reach register"),
    ("^,*,a,2,x,377,0,0,0,0", "bad poll or offset"),
    ("^,*,a,2,12345,377,0,0,0,0", "bad poll or offset"),
    ("^,*,a,2,-12345,377,0,0,0,0", "bad poll or offset"),
    ("^,*,a,2,6,377,0,nan,0,0", "bad poll or offset"),
    ("^,*,a,2,6,777,0,0,0,0", "reach register wider than 8 bits"),
    ("^,*,a,2,6,400,0,0,0,0", "reach register wider than 8 bits"),
])
def test_chrony_source_refusals_say_why(line, reason):
    good = "^,*,ok,2,6,377,0,0,0,0\n"
    assert parsers.parse_chrony_sources(good + line + "\n") == Unparsable(f"{reason}: {line!r}")


def test_chrony_source_line_excerpt_is_cut_at_sixty_characters():
    line = "^,*," + "a" * 100 + ",2,6,377,0,0"
    assert parsers.parse_chrony_sources(line) == Unparsable(
        f"unrecognised source line: {line[:60]!r}")


# -- ntpq -pn -----------------------------------------------------------------------------------
HEAD = ("ntpq banner line\n"
        "     remote           refid      st t when poll reach   delay   offset  jitter\n"
        "==============================================================================\n")


def peers(*rows: str) -> Any:
    return parsers.parse_ntpq_peers(HEAD + "".join(r + "\n" for r in rows))


def test_ntpq_peers_fields():
    got = peers("*10.0.0.5       10.9.9.9         2 u   30   64  377    0.513    1.500   0.248",
                "",
                "o127.127.22.0   .PPS.            0 l    5   16  777    0.000   -0.250   0.001",
                " 10.0.0.6       .INIT.          16 u    -  1024    0    0.000    0.000   0.000",
                ".10.0.0.7       10.9.9.9         3 u   30   2m   17    0.513    0.000   0.248",
                "#10.0.0.8       10.9.9.9         3 u   30   1h    1    0.513    0.000   0.248",
                "x10.0.0.9       10.9.9.9         3 u   30   1d    1    0.513    0.000   0.248",
                "-10.0.0.10      10.9.9.9         3 u   30  64s    1    0.513    0.000   0.248",
                "+10.0.0.11      10.9.9.9         3 u   30   64    1    0.513    0.000   0.248")
    assert got == [
        Source("10.0.0.5 (10.9.9.9)", "^", "*", 2, 0, 0o377, 0.0015),
        Source("127.127.22.0 (.PPS.)", "#", "*", 0, 0, 0o377, -0.00025),
        Source("10.0.0.6 (.INIT.)", "^", " ", 16, 0, 0, 0.0),
        Source("10.0.0.7 (10.9.9.9)", "^", ".", 3, 0, 0o17, 0.0),
        Source("10.0.0.8 (10.9.9.9)", "^", "#", 3, 0, 1, 0.0),
        Source("10.0.0.9 (10.9.9.9)", "^", "x", 3, 0, 1, 0.0),
        Source("10.0.0.10 (10.9.9.9)", "^", "-", 3, 0, 1, 0.0),
        Source("10.0.0.11 (10.9.9.9)", "^", "+", 3, 0, 1, 0.0),
    ]


def test_ntpq_header_may_be_indented_and_nothing_after_it_is_an_empty_list():
    header = "  remote refid st t when poll reach delay offset jitter\n"
    assert parsers.parse_ntpq_peers(header) == []


@pytest.mark.parametrize("text, reason", [
    ("", "no ntpq peers header: ''"),
    ("No association ID's returned\n", "no ntpq peers header: \"No association ID's returned\""),
    ("remote refid st t when poll reach delay\n", "no ntpq peers header: "
                                                   "'remote refid st t when poll reach delay'"),
])
def test_ntpq_without_its_header(text, reason):
    assert parsers.parse_ntpq_peers(text) == Unparsable(reason)


@pytest.mark.parametrize("row, reason", [
    ("*10.0.0.5 10.9.9.9 2 u 30 64 377 0.5 1.5", "unrecognised peer line"),
    ("!10.0.0.5 10.9.9.9 2 u 30 64 377 0.5 1.5 0.2", "unrecognised peer line"),
    ("*10.0.0.5 10.9.9.9 x u 30 64 377 0.5 1.5 0.2", "bad stratum or reach register"),
    ("*10.0.0.5 10.9.9.9 2 u 30 64 378 0.5 1.5 0.2", "bad stratum or reach register"),
    ("*10.0.0.5 10.9.9.9 2 u 30 64 1777 0.5 1.5 0.2", "bad stratum or reach register"),
    ("*10.0.0.5 10.9.9.9 2 u 30 64 377 0.5 x 0.2", "bad poll or offset"),
    ("*10.0.0.5 10.9.9.9 2 u 30 6x 377 0.5 1.5 0.2", "bad poll or offset"),
    ("*10.0.0.5 10.9.9.9 2 u 30 1234567890123 377 0.5 1.5 0.2", "bad poll or offset"),
])
def test_ntpq_peer_refusals_say_why(row, reason):
    assert peers(row) == Unparsable(f"{reason}: {row!r}")


def test_ntpq_twelve_digit_poll_is_read():
    got = peers("*10.0.0.5 10.9.9.9 2 u 30 123456789012 377 0.5 1.5 0.2")
    assert isinstance(got, list) and got[0].reach == 0o377


@pytest.mark.parametrize("name, local", [
    ("127.127.1.0 (.LOCL.)", True), ("127.127.1.1 (x)", True), ("10.0.0.1 (.LOCL.)", True),
    ("127.127.10.1 (.GPS.)", False), ("127.127.28.0 (.SHM.)", False),
    ("10.0.0.1 (10.9.9.9)", False), ("10.0.0.1 (LOCL)", False),
])
def test_ntpd_local_clock_driver(name, local):
    assert parsers.ntpq_local_clock(Source(name, "#", "*", 10, 0, 1, 0.0)) is local


# -- timedatectl --------------------------------------------------------------------------------
def test_key_values_keep_well_formed_keys_only():
    text = ("NTP=yes\nNTPSynchronized= no \nTimezone=Etc/UTC=x\nnot a pair\n1Key=x\nA_B=x\n"
            "=x\nK9=\n")
    assert parsers.parse_key_values(text) == {"NTP": "yes", "NTPSynchronized": "no",
                                      "Timezone": "Etc/UTC=x", "K9": ""}


@pytest.mark.parametrize("span, seconds", [
    ("5ns", 5e-9), ("5us", 5e-6), ("5µs", 5e-6), ("5ms", 5e-3), ("5s", 5.0),
    ("5min", 300.0), ("5h", 18000.0), ("5d", 432000.0), ("+2.5s", 2.5), (" -1h 30min ", -5400.0),
    ("- 2s", -2.0), ("1d 1h 1min 1s", 90061.0),
])
def test_timespans_in_each_unit(span, seconds):
    assert parsers.parse_timespan(span) == pytest.approx(seconds)


@pytest.mark.parametrize("span", [
    "", "+", " - ", "5", "5 s", "1min2s", "5sec", "١s", "1234567890123456s", "1.1234567890123456s",
    "+5s garbage",
])
def test_timespans_refused(span):
    assert parsers.parse_timespan(span) is None


def test_timesync_status_fields():
    text = ("       Server: 2001:db8::1 (ntp.example.internal)\n         Leap: normal\n"
            "      Stratum: 2\n       Offset: -1.5ms\n Packet count: 12345678901234567890\n"
            "    : ignored\n")
    assert parsers.parse_timesync_status(text) == TimesyncStatus(
        "2001:db8::1 (ntp.example.internal)", "normal", 2, -0.0015, 12345678901234567890)


def test_timesync_status_before_a_reply_has_no_numbers():
    text = "Server: 10.0.0.1\n Packet count: 123456789012345678901\n"
    assert parsers.parse_timesync_status(text) == (
        TimesyncStatus("10.0.0.1", "", None, None, None))


def test_timesync_status_refusals_say_why():
    assert parsers.parse_timesync_status("Leap: normal\n") == Unparsable(
        "no 'Server:' line: 'Leap: normal'")
    bad = "Offset: " + "x" * 50
    assert parsers.parse_timesync_status("Server: a\n" + bad + "\n") == Unparsable(
        f"bad Offset: {'x' * 40!r}")


# -- adjtimex -----------------------------------------------------------------------------------
def fact(**over: Any) -> Any:
    base = {"state": 0, "status": 0x2001, "maxerror_us": 4500, "esterror_us": 1234,
            "offset_ns": 1_500_000}
    base.update(over)
    return base


def test_adjtimex_fields_and_details():
    k = parsers.parse_adjtimex(fact())
    assert k == KernelTime("TIME_OK", ["STA_PLL", "STA_NANO"], 4500, 1234, 0.0015)
    assert isinstance(k, KernelTime)
    assert k.details() == {"state": "TIME_OK", "flags": ["STA_PLL", "STA_NANO"],
                           "maxerror_ms": 4.5, "esterror_ms": 1.234, "offset_s": 0.0015,
                           "synchronised": True}


def test_adjtimex_details_round_to_the_microsecond_and_say_unsynchronised():
    k = parsers.parse_adjtimex(fact(status=0x40, maxerror_us=1_234_567, esterror_us=1))
    assert isinstance(k, KernelTime)
    assert k.details() == {"state": "TIME_OK", "flags": ["STA_UNSYNC"],
                           "maxerror_ms": 1234.567, "esterror_ms": 0.001, "offset_s": 0.0015,
                           "synchronised": False}


def test_adjtimex_every_status_bit_in_order():
    k = parsers.parse_adjtimex(fact(status=0xFFFF))
    assert isinstance(k, KernelTime)
    assert k.flags == ["STA_PLL", "STA_PPSFREQ", "STA_PPSTIME", "STA_FLL", "STA_INS", "STA_DEL",
                       "STA_UNSYNC", "STA_FREQHOLD", "STA_PPSSIGNAL", "STA_PPSJITTER",
                       "STA_PPSWANDER", "STA_PPSERROR", "STA_CLOCKERR", "STA_NANO", "STA_MODE",
                       "STA_CLK"]


@pytest.mark.parametrize("state, name", [
    (0, "TIME_OK"), (1, "TIME_INS"), (2, "TIME_DEL"), (3, "TIME_OOP"), (4, "TIME_WAIT"),
    (5, "TIME_ERROR"), (6, "state 6"), (-1, "state -1"),
])
def test_adjtimex_clock_states(state, name):
    k = parsers.parse_adjtimex(fact(state=state))
    assert isinstance(k, KernelTime) and k.state == name


@pytest.mark.parametrize("maxerror, synced", [(15_999_999, True), (16_000_000, False)])
def test_adjtimex_maxerror_limit_is_sixteen_seconds(maxerror, synced):
    k = parsers.parse_adjtimex(fact(maxerror_us=maxerror))
    assert isinstance(k, KernelTime) and k.synchronised is synced


@pytest.mark.parametrize("offset, seconds", [
    (2_500_000_000, 2.5), (-1500.0, -1.5e-6), (True, 0.0), (float("nan"), 0.0),
    (float("inf"), 0.0), (2**63, 0.0), ("5", 0.0), (None, 0.0),
])
def test_adjtimex_offset_read_only_from_a_finite_number(offset, seconds):
    k = parsers.parse_adjtimex(fact(offset_ns=offset))
    assert isinstance(k, KernelTime) and k.offset_s == pytest.approx(seconds)


def test_adjtimex_without_offset_is_zero():
    f = fact()
    del f["offset_ns"]
    k = parsers.parse_adjtimex(f)
    assert isinstance(k, KernelTime) and k.offset_s == 0.0


LACKS = Unparsable("adjtimex fact lacks integer state/status/maxerror_us/esterror_us")


@pytest.mark.parametrize("over", [
    {"state": None}, {"status": True}, {"maxerror_us": 1.5}, {"esterror_us": "1"},
    {"maxerror_us": 2**63}, {"esterror_us": -(2**63)},
])
def test_adjtimex_needs_four_c_long_integers(over):
    assert parsers.parse_adjtimex(fact(**over)) == LACKS


def test_adjtimex_largest_c_long_is_read():
    k = parsers.parse_adjtimex(fact(maxerror_us=2**63 - 1, esterror_us=-(2**63) + 1))
    assert isinstance(k, KernelTime) and k.maxerror_us == 2**63 - 1


def test_adjtimex_not_a_mapping():
    assert parsers.parse_adjtimex([1]) == Unparsable("adjtimex fact is a list, not a mapping")
    assert parsers.parse_adjtimex(None) is None


def test_a_line_without_a_colon_is_no_field():
    assert parsers.parse_timesync_status("Server\n") == Unparsable("no 'Server:' line: 'Server'")


def test_a_timespan_with_a_letter_before_it_is_refused():
    assert parsers.parse_timespan("X5s") is None
