"""time-sync's orchestration hands the kernel's adjtimex state to the timesyncd verdict:
systemd-timesyncd keeps no reach register, so the kernel state it sets on every update is
its staleness signal (systemd timesyncd-manager.c manager_adjust_clock; docs/time-sync.md),
and it wins over `timedatectl show`'s NTPSynchronized (which is read only without it)."""
from typing import Any, Dict, Sequence, Tuple

from agent.host.seam import Host, StaticFacts
from agent.hostview import CommandResult
from agent.model import Status
from checks.policy import ResolvedPolicy, load_policy
from checks.time.time_sync import TIME_SYNC

TRACKING = ("chronyc", "-c", "tracking")
STATUS = ("timedatectl", "timesync-status")
SHOW = ("timedatectl", "show")
TIMESYNC_OUT = ("       Server: 10.0.0.1 (ntp.example.internal)\n         Leap: normal\n"
                "      Stratum: 2\n       Offset: -412us\n Packet count: 118\n")
# STA_UNSYNC (0x40) set, STA_NANO (0x2000): the kernel says not synchronised.
UNSYNCED = {"state": 5, "status": 0x2040, "maxerror_us": 16_000_000, "esterror_us": 0}


class Answers:
    def __init__(self, answers: Dict[Tuple[str, ...], CommandResult]) -> None:
        self.answers = answers

    def run(self, argv: Sequence[str], timeout: float) -> CommandResult:
        return self.answers.get(tuple(argv)) or CommandResult(tuple(argv), 127, "", "")


def run(tmp_path, adjtimex: Any):
    answers = {STATUS: CommandResult(STATUS, 0, TIMESYNC_OUT),
               SHOW: CommandResult(SHOW, 0, "NTP=yes\nNTPSynchronized=yes\n")}
    host = Host(tmp_path, commands=Answers(answers), facts=StaticFacts({"adjtimex": adjtimex}))
    return TIME_SYNC.run(host, ResolvedPolicy(load_policy(2), "dra", settings={}))


def test_timesyncd_verdict_takes_the_kernel_state_over_timedatectl(tmp_path):
    out = run(tmp_path, UNSYNCED)
    assert (out.status, out.code) == (Status.FAIL, "unsynchronised")
    assert out.summary == ("systemd-timesyncd has server 10.0.0.1 (ntp.example.internal) but the "
                           "kernel clock is not synchronised (no update for hours, or never)")
    assert out.details["kernel_synchronised"] is False
    assert out.details["kernel"]["flags"] == ["STA_UNSYNC", "STA_NANO"]
