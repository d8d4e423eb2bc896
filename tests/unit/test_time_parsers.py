"""The time-sync parsers on real daemon output (tests/fixtures/time-sync, README.md there says
where each file came from), on garbage, and under hypothesis."""
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from checks.time.parsers import (
    ChronyTracking,
    KernelTime,
    Unparsable,
    ntpq_local_clock,
    parse_adjtimex,
    parse_chrony_sources,
    parse_chrony_tracking,
    parse_key_values,
    parse_ntpq_peers,
    parse_timespan,
    parse_timesync_status,
)

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "time-sync"


def fixture(name: str) -> str:
    return (FIX / name).read_text()


def test_chrony_tracking_synced_real_output():
    t = parse_chrony_tracking(fixture("chronyc-c-tracking.synced-ntp.csv"))
    assert isinstance(t, ChronyTracking)
    # The text form of the same capture says "Stratum : 4", "0.000001376 seconds fast",
    # "Leap status : Normal", "Reference ID : 7F000001 (localhost)".
    text = fixture("chronyc-tracking.synced-ntp.txt")
    assert f"Stratum         : {t.stratum}" in text
    assert f"{abs(t.offset_s):.9f} seconds fast" in text and t.offset_s < 0
    assert t.refid in text and t.leap == "Normal" and t.synchronised and not t.local_only


def test_chrony_tracking_unsynchronised_and_local_real_output():
    t = parse_chrony_tracking(fixture("chronyc-c-tracking.unsynchronised.csv"))
    assert isinstance(t, ChronyTracking) and not t.synchronised and t.stratum == 0
    local = parse_chrony_tracking(fixture("chronyc-c-tracking.local-refclock-stratum3.csv"))
    assert isinstance(local, ChronyTracking)
    assert local.synchronised and local.local_only and local.name == "" and local.stratum == 3


def test_chrony_sources_real_output():
    synced = parse_chrony_sources(fixture("chronyc-c-sources.synced-ntp.csv"))
    assert not isinstance(synced, Unparsable)
    assert [(s.name, s.state, s.reach, s.poll) for s in synced] == [("127.0.0.1", "*", 0o377, -2)]
    # the text form of the same capture: "^* localhost  3  -2   377"
    assert " 377 " in fixture("chronyc-sources.synced-ntp.txt")
    dead = parse_chrony_sources(fixture("chronyc-c-sources.unsynchronised.csv"))
    assert not isinstance(dead, Unparsable) and dead[0].state == "?" and dead[0].reach == 0
    lost = parse_chrony_sources(fixture("chronyc-c-sources.server-stopped-reach300.csv"))
    assert not isinstance(lost, Unparsable) and lost[0].reach == 0b11000000
    assert parse_chrony_sources("") == []  # a server with no sources configured


@pytest.mark.parametrize("text", [
    "", "506 Cannot talk to daemon\n", "7F000001,127.0.0.1,4\n",
    fixture("chronyc-c-tracking.synced-ntp.csv")[:41],
    fixture("chronyc-c-tracking.synced-ntp.csv") * 2,
    fixture("chronyc-c-tracking.synced-ntp.csv").replace("Normal", "Sideways"),
    fixture("chronyc-c-tracking.synced-ntp.csv").replace("-0.000001376", "nan"),
    fixture("chronyc-tracking.synced-ntp.txt"),  # the human form is not the CSV form
])
def test_chrony_tracking_garbage_is_unparsable_with_a_reason(text):
    result = parse_chrony_tracking(text)
    assert isinstance(result, Unparsable) and result.reason


@pytest.mark.parametrize("text", [
    "^,*,127.0.0.1,3,-2,377\n", "^,!,127.0.0.1,3,-2,377,0,0,0,0\n",
    "^,*,127.0.0.1,3,-2,378,0,0,0,0\n", "^,*,127.0.0.1,3,-2,1777,0,0,0,0\n",
    "^,*,127.0.0.1,x,-2,377,0,0,0,0\n", fixture("chronyc-sources.synced-ntp.txt"),
])
def test_chrony_sources_garbage_is_unparsable(text):
    assert isinstance(parse_chrony_sources(text), Unparsable)


def test_ntpq_real_outputs():
    peers = parse_ntpq_peers(fixture("ntpq-p.pkb-ntp-test.unreached-peer.txt"))
    assert not isinstance(peers, Unparsable) and len(peers) == 5
    selected = [p for p in peers if p.selected]
    assert len(selected) == 1 and selected[0].name.startswith("ec2-54-83-7-186")
    assert selected[0].reach == 0o37 and selected[0].offset_s == pytest.approx(0.006506)
    assert [p.state for p in peers] == ["*", " ", "+", "-", "+"]
    assert isinstance(parse_ntpq_peers("ntpq: read: Connection refused"), Unparsable)


def test_ntpq_local_clock_driver_is_recognised():
    text = fixture("ntpq-p.pkb-ntp-test.synced.txt").replace(
        "*metadata.google 120.68.64.68  ", "*127.127.1.0     .LOCL.        ")
    peers = parse_ntpq_peers(text)
    assert not isinstance(peers, Unparsable) and ntpq_local_clock(peers[0])


def test_timedatectl_show_real_output():
    kv = parse_key_values(fixture("timedatectl-show.opentrons-test-fixture.ntp-on-not-synchronized.txt"))
    assert kv["NTP"] == "yes" and kv["NTPSynchronized"] == "no"


@pytest.mark.parametrize("span, seconds", [
    ("+1.234ms", 0.001234), ("-412us", -0.000412), ("-1min 2.5s", -62.5), ("+7ns", 7e-9),
    ("garbage", None), ("", None), ("+1.5 parsecs", None),
])
def test_systemd_timespans(span, seconds):
    got = parse_timespan(span)
    assert got == (None if seconds is None else pytest.approx(seconds))


def test_timesync_status_needs_a_server_line():
    assert isinstance(parse_timesync_status("Leap: normal\n"), Unparsable)
    st_ = parse_timesync_status("       Server: 10.0.0.1 (ntp)\n Packet count: 0\n")
    assert not isinstance(st_, Unparsable) and st_.packets == 0 and st_.offset_s is None


def test_adjtimex_fact_decoding():
    k = parse_adjtimex({"state": 5, "status": 0x2041, "maxerror_us": 16_000_000,
                        "esterror_us": 0, "offset_ns": -1500})
    assert isinstance(k, KernelTime)
    assert k.flags == ["STA_PLL", "STA_UNSYNC", "STA_NANO"] and k.state == "TIME_ERROR"
    assert not k.synchronised and k.offset_s == pytest.approx(-1.5e-6)
    ok = parse_adjtimex({"state": 0, "status": 0x2000, "maxerror_us": 15_999_999,
                         "esterror_us": 0})
    assert isinstance(ok, KernelTime) and ok.synchronised
    assert parse_adjtimex(None) is None
    assert isinstance(parse_adjtimex({"status": "x"}), Unparsable)
    assert isinstance(parse_adjtimex([1, 2]), Unparsable)


# -- hypothesis ---------------------------------------------------------------------------
@settings(max_examples=300, deadline=None)
@given(st.text())
def test_parsers_never_raise_on_any_text(text):
    for parse in (parse_chrony_tracking, parse_chrony_sources, parse_ntpq_peers,
                  parse_timesync_status, parse_key_values, parse_timespan):
        parse(text)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["state", "status", "maxerror_us", "esterror_us",
                                        "offset_ns"]),
                       st.one_of(st.integers(), st.floats(), st.text(), st.none(), st.booleans())))
def test_adjtimex_never_raises(fact):
    parse_adjtimex(fact)


@settings(max_examples=200, deadline=None)
@given(
    refid=st.from_regex(r"[0-9A-F]{8}", fullmatch=True),
    name=st.from_regex(r"[a-z0-9.]{0,20}", fullmatch=True),
    stratum=st.integers(0, 16),
    offset=st.floats(-1e4, 1e4, allow_nan=False),
    leap=st.sampled_from(["Normal", "Insert second", "Delete second", "Not synchronised"]),
)
def test_chrony_tracking_round_trip(refid, name, stratum, offset, leap):
    line = (f"{refid},{name},{stratum},1795962210.027905305,{offset:.9f},-0.000000010,"
            f"0.000000049,0.002,-0.000,0.035,0.000005059,0.000000988,0.3,{leap}\n")
    t = parse_chrony_tracking(line)
    assert isinstance(t, ChronyTracking)
    assert (t.refid, t.name, t.stratum, t.leap) == (refid, name, stratum, leap)
    assert t.offset_s == pytest.approx(float(f"{offset:.9f}"))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("^=#"), st.sampled_from("*+-?x~"),
                          st.integers(0, 0o377), st.integers(-6, 24)), max_size=6))
def test_chrony_sources_round_trip_reach_register(rows):
    text = "".join(f"{m},{s},10.0.0.{i},2,{p},{r:o},12,0.000001,0.000001,0.0001\n"
                   for i, (m, s, r, p) in enumerate(rows))
    parsed = parse_chrony_sources(text)
    assert not isinstance(parsed, Unparsable)
    assert [(x.mode, x.state, x.reach, x.poll) for x in parsed] == [
        (m, s, r, p) for m, s, r, p in rows]
