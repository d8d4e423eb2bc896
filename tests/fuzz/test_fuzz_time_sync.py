"""Time-sync parsers (checks/time/parsers.py) and the time-sync check over them, on hostile
daemon output: `chronyc -c tracking`/`sources`, `timedatectl show`/`timesync-status`,
`ntpq -pn`, the adjtimex fact. Each parser returns a value or ``Unparsable(reason)`` (our
error type, a value, never raised); the check returns an Outcome."""
from typing import Any, Dict, List, Optional, Tuple

from hypothesis import strategies as st

from agent.hostview import CommandResult
from agent.model import Outcome, Status
from checks.time.parsers import (
    ChronyTracking,
    KernelTime,
    TimesyncStatus,
    Unparsable,
    parse_adjtimex,
    parse_chrony_sources,
    parse_chrony_tracking,
    parse_key_values,
    parse_ntpq_peers,
    parse_timespan,
    parse_timesync_status,
)
from checks.time.time_sync import (
    CHRONY_SOURCES,
    NTPQ_PEERS,
    PTP_PROBES,
    TIME_SYNC,
    TIMEDATECTL_SHOW,
    TIMESYNC_STATUS,
    TRACKING,
)
from tests.fuzz.conftest import deep, expect, quick
from tests.fuzz.strategies import DIGITS, FLOATS, INTS, JSON, NASTY

STATUSES = {s.value for s in Status}
NUM = st.one_of(DIGITS, FLOATS.map(str), NASTY, st.sampled_from(["-0.000012", "1e999", "nan"]))
REFID = st.one_of(st.sampled_from(["C0A80101", "7F7F0101", "00000000"]), NASTY)
LEAP = st.one_of(st.sampled_from(["Normal", "Not synchronised", "Insert second"]), NASTY)


def _csv(parts: List[str]) -> str:
    return ",".join(parts)


TRACKING_OUT = st.one_of(
    st.builds(lambda r, n, s, nums, leap: _csv([r, n, s, "1700000000.1"] + nums + [leap]),
              REFID, NASTY, DIGITS, st.lists(NUM, min_size=9, max_size=9), LEAP),
    NASTY,
)
SOURCE_LINE = st.builds(
    lambda m, s, name, st_, poll, reach, nums: _csv([m, s, name, st_, poll, reach] + nums),
    st.one_of(st.sampled_from(list("^=#")), NASTY), st.one_of(st.sampled_from(list("*+-?x~")), NASTY),
    NASTY, DIGITS, st.one_of(DIGITS, DIGITS.map(lambda d: "-" + d)),
    st.one_of(st.sampled_from(["377", "1", "0", "777", "8"]), DIGITS, NASTY),
    st.lists(NUM, min_size=4, max_size=4))
SOURCES_OUT = st.one_of(st.lists(SOURCE_LINE, max_size=3).map("\n".join), NASTY)
NTPQ_HEADER = ("     remote           refid      st t when poll reach   delay   offset  jitter\n"
               "==============================================================================\n")
NTPQ_LINE = st.builds(
    lambda tally, f: tally + " ".join(f),
    st.one_of(st.sampled_from(list(" *o+-x.#")), NASTY),
    st.tuples(NASTY, NASTY, DIGITS, st.just("u"), DIGITS,
              st.one_of(DIGITS, DIGITS.map(lambda d: d + "m")),
              st.one_of(st.sampled_from(["377", "17"]), DIGITS), NUM, NUM, NUM))
NTPQ_OUT = st.one_of(st.lists(NTPQ_LINE, max_size=3).map(lambda ls: NTPQ_HEADER + "\n".join(ls)),
                     NASTY)
SPAN = st.one_of(
    st.lists(st.builds(lambda n, u: n + u, NUM,
                       st.sampled_from(["ns", "us", "µs", "ms", "s", "min", "h", "d"])),
             min_size=1, max_size=3).map(" ".join).map(lambda s: "+" + s),
    NASTY)
STATUS_OUT = st.builds(
    lambda server, leap, stratum, offset, packets, junk: (
        f"       Server: {server}\n Poll interval: 34min 8s\n         Leap: {leap}\n"
        f"      Stratum: {stratum}\n       Offset: {offset}\n Packet count: {packets}\n{junk}"),
    NASTY, st.one_of(st.just("normal"), NASTY), DIGITS, SPAN, DIGITS, NASTY)
SHOW_OUT = st.lists(st.builds(lambda k, v: f"{k}={v}",
                              st.sampled_from(["NTPSynchronized", "NTP", "Timezone"]),
                              st.one_of(st.sampled_from(["yes", "no"]), NASTY)), max_size=3
                    ).map("\n".join)
ADJTIMEX = st.one_of(
    st.fixed_dictionaries({}, optional={k: st.one_of(INTS, JSON) for k in (
        "state", "status", "maxerror_us", "esterror_us", "offset_ns")}),
    JSON)


def result(stdout: str, rc: int = 0, timed_out: bool = False) -> CommandResult:
    return CommandResult((), rc, stdout, "", timed_out)


RESULT = st.builds(lambda out, rc, t: (out, rc, t), st.one_of(TRACKING_OUT, SOURCES_OUT, NTPQ_OUT,
                                                             STATUS_OUT, SHOW_OUT, NASTY),
                   st.sampled_from([0, 0, 0, 1, 127]), st.booleans())


class TimeHost:
    def __init__(self, answers: Dict[Tuple[str, ...], Tuple[str, int, bool]], adjtimex: Any):
        self._answers = answers
        self._adjtimex = adjtimex

    def run(self, argv: List[str], timeout: Optional[float] = None) -> CommandResult:
        out, rc, timed_out = self._answers.get(tuple(argv), ("", 127, False))
        return CommandResult(tuple(argv), rc, out, "", timed_out)

    def fact(self, name: str) -> Any:
        return self._adjtimex if name == "adjtimex" else None


ARGVS = (TRACKING, CHRONY_SOURCES, TIMESYNC_STATUS, TIMEDATECTL_SHOW, NTPQ_PEERS, *PTP_PROBES)
CASES = st.tuples(TRACKING_OUT, SOURCES_OUT, NTPQ_OUT, STATUS_OUT, SHOW_OUT, SPAN, ADJTIMEX,
                  st.fixed_dictionaries({}, optional={argv: RESULT for argv in ARGVS}))


def time_sync(case: Any) -> None:
    tracking, sources, ntpq, status, show, span, adjtimex, answers = case
    t = parse_chrony_tracking(tracking)
    expect(isinstance(t, (ChronyTracking, Unparsable)), "chrony tracking", t)
    s = parse_chrony_sources(sources)
    expect(isinstance(s, (list, Unparsable)), "chrony sources", s)
    n = parse_ntpq_peers(ntpq)
    expect(isinstance(n, (list, Unparsable)), "ntpq peers", n)
    ts = parse_timesync_status(status)
    expect(isinstance(ts, (TimesyncStatus, Unparsable)), "timesync-status", ts)
    expect(isinstance(parse_key_values(show), dict), "timedatectl show")
    value = parse_timespan(span)
    expect(value is None or isinstance(value, float), "timespan", value)
    k = parse_adjtimex(adjtimex)
    expect(k is None or isinstance(k, (KernelTime, Unparsable)), "adjtimex", k)
    if isinstance(k, KernelTime):
        k.details()
    out = TIME_SYNC.run(TimeHost(answers, adjtimex), None)
    expect(isinstance(out, Outcome) and str(out.status) in STATUSES, "time-sync outcome", out)
    try:
        out.summary.encode("utf-8")  # printed by `check`, logged by `run`
    except UnicodeEncodeError:
        expect(False, "time-sync summary cannot be printed", out.summary)


test_time_sync_quick = quick(CASES, time_sync)
test_time_sync_deep = deep("time-sync parsers and check", CASES, time_sync)
