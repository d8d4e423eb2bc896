"""checks/time/time_sync.py, the orchestration: the settings and their defaults, which commands are
asked in which order (chrony, systemd-timesyncd, ntpd, then PTP, then the kernel) with which
argv and deadline, what each fallback records as tried, and the kernel details added to every
verdict.

The verdicts themselves are checks/time/daemons.py's (tested in tests/checks/test_time_sync.py);
here a daemon's verdict is compared with the judge called on the same answers, and the
orchestration's own outcomes (timeouts, "no associations", nothing answered) are written by
hand from docs/time-sync.md and the tools' documented output (chronyc(1) `-c` CSV, ntpq(1)
"No association ID's returned", pgrep(1) exit status 1 when nothing matches).
"""
from types import SimpleNamespace
from typing import Any, Dict, List, Optional, Tuple

import pytest

from agent.config import Config
from agent.host.seam import Host, StaticFacts
from agent.hostview import CommandResult
from agent.model import Outcome, Status
from checks.policy import ResolvedPolicy, load_policy
from checks.time.daemons import Settings, judge_chrony, judge_ntpd, judge_ptp, judge_timesyncd
from checks.time.parsers import parse_adjtimex
from checks.time.time_sync import TIME_SYNC, _chrony_argv, _with_kernel, settings_of
from tests.checks.answers_support import Answers

TRACKING = ("chronyc", "-c", "tracking")
SOURCES = ("chronyc", "-c", "sources")
STATUS = ("timedatectl", "timesync-status")
SHOW = ("timedatectl", "show")
NTPQ = ("ntpq", "-pn")
PHC2SYS = ("pgrep", "-x", "phc2sys")
PTP4L = ("pgrep", "-x", "ptp4l")
SOCK = "/run/chrony/chronyd.sock"

TRACKING_OUT = ("7F000001,127.0.0.1,4,1795962210.027905305,-0.000001376,-0.000000010,"
                "0.000000049,0.002,-0.000,0.035,0.000005059,0.000000988,0.3,Normal\n")
SOURCES_OUT = "^,*,127.0.0.1,3,-2,377,0,0.000000022,0.000000012,0.000003068\n"
TIMESYNC_OUT = ("       Server: 127.0.0.1 (ntp.example.internal)\n"
                "Poll interval: 34min 8s (min: 32s; max 34min 8s)\n         Leap: normal\n"
                "      Version: 4\n      Stratum: 2\n    Reference: C0A80101\n"
                "Root distance: 1.234ms (max: 5s)\n       Offset: -412us\n"
                "        Delay: 1.002ms\n       Jitter: 88us\n Packet count: 118\n")
SHOW_OUT = "NTP=yes\nNTPSynchronized=yes\n"
NTPQ_OUT = ("      remote           refid      st t when poll reach   delay   offset  jitter\n"
            "==============================================================================\n"
            "*10.20.0.5      120.68.64.68     2 u   30   64    1    0.513    0.300   0.248\n")
SYNCED = {"state": 0, "status": 8192, "maxerror_us": 4500, "esterror_us": 0, "offset_ns": 0}
DEFAULT = Settings(0.1, 1.0, None, 4)


def ok(argv, stdout: str = "") -> CommandResult:
    return CommandResult(tuple(argv), 0, stdout, "")


def missing(argv) -> CommandResult:
    return CommandResult(tuple(argv), 127, "", f"{argv[0]}: command not found")


NOTHING = {TRACKING: missing(TRACKING), SOURCES: missing(SOURCES), STATUS: missing(STATUS),
           SHOW: missing(SHOW), NTPQ: missing(NTPQ), PHC2SYS: CommandResult(PHC2SYS, 1),
           PTP4L: CommandResult(PTP4L, 1)}


def pol(time_sync: Optional[Dict[str, Any]] = None) -> Any:
    return SimpleNamespace(setting=lambda name: time_sync if name == "time_sync" else None)


def run(tmp_path, answers: Dict[Tuple[str, ...], CommandResult], adjtimex: Any = None,
        time_sync: Optional[Dict[str, Any]] = None) -> Tuple[Outcome, List[Any]]:
    commands = Answers(answers)
    facts = {"adjtimex": adjtimex} if adjtimex is not None else {}
    out = TIME_SYNC.run(Host(tmp_path, commands=commands, facts=StaticFacts(facts)),
                        pol(time_sync))
    return out, commands.calls


def kernel_details(fact: Any) -> Any:
    return parse_adjtimex(fact).details()  # type: ignore[union-attr]


# -- settings ------------------------------------------------------------------------------
def test_settings_defaults():
    assert settings_of(None) == DEFAULT
    # settings_of now takes a ResolvedPolicy (no getattr fallback for other objects): a real
    # policy with no time_sync setting at all, and one with the config's defaults (100 ms /
    # 1 s / 4 polls, docs/time-sync.md), both give the defaults.
    assert settings_of(ResolvedPolicy(load_policy(1), "dra", settings={})) == DEFAULT
    assert settings_of(ResolvedPolicy(load_policy(1), "dra",
                                      settings=Config().model_dump())) == DEFAULT
    assert settings_of(pol(None)) == DEFAULT
    assert settings_of(pol({})) == DEFAULT


def test_settings_configured_and_warn_capped_at_fail():
    got = settings_of(pol({"offset_fail_s": "0.5", "offset_warn_s": 2, "chrony_socket": SOCK,
                           "reach_polls": "8"}))
    assert got == Settings(0.5, 0.5, SOCK, 8)
    assert settings_of(pol({"offset_warn_s": 0.25})) == Settings(0.25, 1.0, None, 4)
    assert settings_of(pol({"offset_fail_s": 3})) == Settings(0.1, 3.0, None, 4)


def test_chrony_argv_names_the_socket():
    assert _chrony_argv(TRACKING, None) == TRACKING
    assert _chrony_argv(TRACKING, "") == TRACKING
    assert _chrony_argv(SOURCES, SOCK) == ("chronyc", "-h", SOCK, "-c", "sources")


# -- chrony ----------------------------------------------------------------------------------
def test_chrony_answers_first(tmp_path):
    answers = {**NOTHING, TRACKING: ok(TRACKING, TRACKING_OUT), SOURCES: ok(SOURCES, SOURCES_OUT)}
    out, calls = run(tmp_path, answers, SYNCED)
    judged = judge_chrony(answers[TRACKING], answers[SOURCES], DEFAULT)
    assert judged.details["daemon"] == "chrony"
    assert out == Outcome(judged.status, judged.summary,
                          {**judged.details, "kernel": kernel_details(SYNCED)}, None)
    assert calls == [(TRACKING, 5.0), (SOURCES, 5.0)]


def test_chrony_socket_form_is_asked_first(tmp_path):
    sock_tracking = ("chronyc", "-h", SOCK, "-c", "tracking")
    sock_sources = ("chronyc", "-h", SOCK, "-c", "sources")
    answers: Dict[Tuple[str, ...], CommandResult] = {
        sock_tracking: ok(sock_tracking, TRACKING_OUT), sock_sources: ok(sock_sources, SOURCES_OUT)}
    out, calls = run(tmp_path, answers, time_sync={"chrony_socket": SOCK})
    assert calls == [(sock_tracking, 5.0), (sock_sources, 5.0)]
    assert out.details["daemon"] == "chrony" and out.details["kernel"] is None


def test_chrony_socket_form_not_recorded_falls_back_to_the_plain_form(tmp_path):
    sock_tracking = ("chronyc", "-h", SOCK, "-c", "tracking")
    answers: Dict[Tuple[str, ...], CommandResult] = {
        TRACKING: ok(TRACKING, TRACKING_OUT), SOURCES: ok(SOURCES, SOURCES_OUT)}
    out, calls = run(tmp_path, answers, time_sync={"chrony_socket": SOCK})
    assert calls == [(sock_tracking, 5.0), (TRACKING, 5.0), (SOURCES, 5.0)]
    judged = judge_chrony(answers[TRACKING], answers[SOURCES], Settings(0.1, 1.0, SOCK, 4))
    assert (out.status, out.summary) == (judged.status, judged.summary)


def test_chrony_timing_out_is_unknown(tmp_path):
    answers = {**NOTHING, TRACKING: CommandResult(TRACKING, -1, "", "", timed_out=True)}
    out, calls = run(tmp_path, answers)
    assert out == Outcome(Status.UNKNOWN,
                          "chronyd did not answer in time: `chronyc -c tracking` timed out",
                          {"daemon": "chrony", "kernel": None}, code="daemon-unreadable")
    assert calls == [(TRACKING, 5.0)]


# -- the fallbacks ---------------------------------------------------------------------------
def test_timesyncd_when_chrony_does_not_answer(tmp_path):
    answers = {**NOTHING, STATUS: ok(STATUS, TIMESYNC_OUT), SHOW: ok(SHOW, SHOW_OUT)}
    out, calls = run(tmp_path, answers, SYNCED, {"offset_warn_s": 0.0001})
    s = Settings(0.0001, 1.0, None, 4)
    judged = judge_timesyncd(answers[STATUS], answers[SHOW], parse_adjtimex(SYNCED), s)
    assert judged.status == Status.WARN  # -412 us is over the configured 100 us warning
    assert judged.code == "offset-over-warning"
    assert out == Outcome(judged.status, judged.summary,
                          {**judged.details, "kernel": kernel_details(SYNCED)}, None,
                          code="offset-over-warning")
    assert calls == [(TRACKING, 5.0), (STATUS, 5.0), (SHOW, 5.0)]


def test_ntpd_when_neither_chrony_nor_timesyncd_answers(tmp_path):
    answers = {**NOTHING, NTPQ: ok(NTPQ, NTPQ_OUT)}
    out, calls = run(tmp_path, answers, None, {"offset_fail_s": 0.0002})
    judged = judge_ntpd(answers[NTPQ], Settings(0.0002, 0.0002, None, 4))
    assert judged.status == Status.FAIL  # 0.300 ms over the configured 0.2 ms limit
    assert judged.code == "offset-over-limit"
    assert out == Outcome(judged.status, judged.summary, {**judged.details, "kernel": None},
                          code="offset-over-limit")
    assert calls == [(TRACKING, 5.0), (STATUS, 5.0), (NTPQ, 5.0)]


def test_ntpd_without_associations_fails(tmp_path):
    answers = {**NOTHING, NTPQ: ok(NTPQ, "No association ID's returned\n")}
    out, _ = run(tmp_path, answers)
    assert out == Outcome(Status.FAIL,
                          "ntpd answers but has no associations (no servers configured)",
                          {"daemon": "ntpd", "kernel": None}, code="no-reachable-source")


def test_nothing_answers_lists_what_was_tried(tmp_path):
    out, calls = run(tmp_path, NOTHING)
    tried = ["`chronyc` not installed", "`timedatectl` not installed", "`ntpq` not installed"]
    assert out == Outcome(
        Status.UNKNOWN,
        "no time daemon answered and the kernel's clock state was not captured (" +
        "; ".join(tried) + ")",
        {"daemon": None, "tried": tried, "offset_s": None, "kernel": None},
        code="nothing-recorded")
    assert calls == [(TRACKING, 5.0), (STATUS, 5.0), (NTPQ, 5.0), (PHC2SYS, 5.0),
                     (PTP4L, 5.0), (SHOW, 5.0)]


def test_ntpq_without_output_is_no_ntpd(tmp_path):
    answers = {**NOTHING, NTPQ: ok(NTPQ, "  \n")}
    out, _ = run(tmp_path, answers)
    assert out.details["tried"] == ["`chronyc` not installed", "`timedatectl` not installed",
                                    "`ntpq -pn`: no answer from ntpd"]


def test_nothing_answers_but_the_kernel_is_synchronised(tmp_path):
    out, _ = run(tmp_path, NOTHING, SYNCED)
    assert out.status == Status.PASS
    assert out.details["kernel"] == kernel_details(SYNCED)
    assert out.details["daemon"] is None


@pytest.mark.parametrize("phc, ptp, running", [
    (ok(PHC2SYS, "4242\n"), ok(PTP4L, "  \n"), ["phc2sys"]),
    (CommandResult(PHC2SYS, 1), ok(PTP4L, "77\n"), ["ptp4l"]),
    (ok(PHC2SYS, "1\n"), ok(PTP4L, "2\n"), ["phc2sys", "ptp4l"]),
])
def test_ptp_process_running_is_judged_by_the_kernel(tmp_path, phc, ptp, running):
    out, calls = run(tmp_path, {**NOTHING, PHC2SYS: phc, PTP4L: ptp}, SYNCED)
    judged = judge_ptp(parse_adjtimex(SYNCED), running, DEFAULT)
    assert out == Outcome(judged.status, judged.summary,
                          {**judged.details, "kernel": kernel_details(SYNCED)}, None)
    assert out.details["processes"] == running
    assert (SHOW, 5.0) not in calls


# -- kernel details --------------------------------------------------------------------------
def test_kernel_details_added_to_any_outcome():
    base = Outcome(Status.FAIL, "s", {"a": 1}, "fix")
    assert _with_kernel(base, None) == Outcome(Status.FAIL, "s", {"a": 1, "kernel": None}, "fix")
    bad = parse_adjtimex("junk")
    assert _with_kernel(base, bad) == Outcome(
        Status.FAIL, "s", {"a": 1, "kernel": {"error": "adjtimex fact is a str, not a mapping"}},
        "fix")
    good = parse_adjtimex(SYNCED)
    assert _with_kernel(base, good).details == {"a": 1, "kernel": kernel_details(SYNCED)}
    assert base.details == {"a": 1}
    # The failure code survives the kernel details being added.
    coded = Outcome(Status.WARN, "s", {}, None, code="local-clock-only")
    assert _with_kernel(coded, None) == Outcome(Status.WARN, "s", {"kernel": None}, None,
                                                code="local-clock-only")


def test_chrony_not_recorded_without_a_socket_is_asked_once(tmp_path):
    answers = {k: v for k, v in NOTHING.items() if k not in (TRACKING, SOURCES)}
    out, calls = run(tmp_path, answers)
    assert calls[:2] == [(TRACKING, 5.0), (STATUS, 5.0)]
    assert out.details["tried"][0] == "`chronyc -c tracking` not recorded for this host"


def test_chrony_socket_configured_but_no_chronyd_moves_on(tmp_path):
    # The socket form is not recorded, the plain form says chronyc is not installed: the
    # next daemon is asked, chrony's answer is not judged.
    answers = {**NOTHING, STATUS: ok(STATUS, TIMESYNC_OUT), SHOW: ok(SHOW, SHOW_OUT)}
    out, calls = run(tmp_path, answers, SYNCED, {"chrony_socket": SOCK})
    assert [c[0] for c in calls] == [("chronyc", "-h", SOCK, "-c", "tracking"), TRACKING,
                                     SOURCES, STATUS, SHOW]
    assert out.details["daemon"] == "timesyncd"
