"""time-sync: one verdict from the time daemon that answers, else from the kernel.

Three definitions of "synchronised" are in use and disagree (docs/time-sync.md): the
adjtimex return code (node_exporter), the kernel's STA_UNSYNC flag (timedatectl, the EKS
monitoring agent) and the daemon's own view (`nodeadm debug`: chronyc/timedatectl). chrony
without `rtcsync` leaves STA_UNSYNC set on a well-synchronised host (chrony.conf(5),
"rtcsync"), so the daemon that answers decides and the kernel flags are only details. The
daemons are asked in order: chrony, systemd-timesyncd, ntpd/ntpsec; then PTP (phc2sys or
ptp4l running: judged by the kernel state they maintain); else the kernel alone.
"""
from typing import Any, Dict, List, Optional, Tuple

from checks.base import (
    ALL_PATHS,
    Check,
    CommandResult,
    Failure,
    HostView,
    Interval,
    Outcome,
    Severity,
    Status,
    failed,
    unknown,
)
from checks.policy import ResolvedPolicy
from checks.time.daemons import (
    DAEMON_UNREADABLE,
    LOCAL_CLOCK_ONLY,
    NO_DAEMON,
    NO_REACHABLE_SOURCE,
    NOTHING_RECORDED,
    OFFSET_OVER_LIMIT,
    OFFSET_OVER_WARNING,
    TRACKING,
    UNSYNCHRONISED,
    KernelState,
    Settings,
    judge_chrony,
    judge_kernel,
    judge_ntpd,
    judge_ptp,
    judge_timesyncd,
)
from checks.time.parsers import KernelTime, Unparsable, parse_adjtimex

CHRONY_SOURCES = ("chronyc", "-c", "sources")
TIMEDATECTL_SHOW = ("timedatectl", "show")
TIMESYNC_STATUS = ("timedatectl", "timesync-status")
NTPQ_PEERS = ("ntpq", "-pn")
# PTP: phc2sys steers CLOCK_REALTIME from a PHC; ptp4l alone does so with software
# timestamping. Both keep the kernel's NTP state (linuxptp clockadj.c sysclk_set_sync():
# clears STA_UNSYNC, maxerror 0), so the kernel state is their verdict. pgrep -x matches the
# process name exactly (procps pgrep(1)); a bundle records its answer like any command.
PTP_PROBES = (("pgrep", "-x", "phc2sys"), ("pgrep", "-x", "ptp4l"))
RUNS: Tuple[Tuple[str, ...], ...] = (
    TRACKING, CHRONY_SOURCES, TIMESYNC_STATUS, TIMEDATECTL_SHOW, NTPQ_PEERS, *PTP_PROBES,
)
TIMEOUT = 5.0


def settings_of(policy: Optional[ResolvedPolicy]) -> Settings:
    raw: Dict[str, Any] = {}
    if policy is not None:
        raw = policy.setting("time_sync") or {}
    fail = float(raw.get("offset_fail_s", 1.0))
    warn = min(float(raw.get("offset_warn_s", 0.1)), fail)  # warn past fail means fail only
    return Settings(warn, fail, raw.get("chrony_socket"), int(raw.get("reach_polls", 4)))


def _chrony_argv(argv: Tuple[str, ...], socket: Optional[str]) -> Tuple[str, ...]:
    return (argv[0], "-h", socket, *argv[1:]) if socket else argv


def _run(host: HostView, argv: Tuple[str, ...]) -> CommandResult:
    return host.run(list(argv), timeout=TIMEOUT)


def _ask_chrony(host: HostView, s: Settings, tried: List[str]) -> Optional[Outcome]:
    tracking = _run(host, _chrony_argv(TRACKING, s.chrony_socket))
    sources: Optional[CommandResult]
    if tracking.not_recorded and s.chrony_socket:
        # collect records the declared argv only; a bundle holds the plain form.
        tracking = _run(host, TRACKING)
        sources = _run(host, CHRONY_SOURCES)
    else:
        sources = _run(host, _chrony_argv(CHRONY_SOURCES, s.chrony_socket)) if tracking.ok else None
    if tracking.timed_out:
        return unknown(f"chronyd did not answer in time: {tracking.describe()}",
                       code=DAEMON_UNREADABLE, daemon="chrony")
    if not tracking.ok or sources is None:
        tried.append(tracking.describe())
        return None
    return judge_chrony(tracking, sources, s)


def _ask_timesyncd(host: HostView, s: Settings, kernel: KernelState,
                   tried: List[str]) -> Optional[Outcome]:
    status = _run(host, TIMESYNC_STATUS)
    if not status.ok:
        tried.append(status.describe())
        return None
    return judge_timesyncd(status, _run(host, TIMEDATECTL_SHOW), kernel, s)


def _ask_ntpd(host: HostView, s: Settings, tried: List[str]) -> Optional[Outcome]:
    peers = _run(host, NTPQ_PEERS)
    # ntpq reports "Connection refused" / "timed out" on stderr when ntpd is not running,
    # with an exit status that differs between ntp and ntpsec: no output = no ntpd.
    if not peers.ok or not peers.stdout.strip():
        tried.append(peers.describe() if not peers.ok else "`ntpq -pn`: no answer from ntpd")
        return None
    if "No association" in peers.stdout:
        return failed("ntpd answers but has no associations (no servers configured)",
                      code=NO_REACHABLE_SOURCE, daemon="ntpd")
    return judge_ntpd(peers, s)


def run(host: HostView, policy: ResolvedPolicy) -> Outcome:
    s = settings_of(policy)
    kernel = parse_adjtimex(host.fact("adjtimex"))
    tried: List[str] = []
    outcome = (
        _ask_chrony(host, s, tried)
        or _ask_timesyncd(host, s, kernel, tried)
        or _ask_ntpd(host, s, tried)
    )
    if outcome is None:
        probes = [_run(host, argv) for argv in PTP_PROBES]
        running = [r.argv[2] for r in probes if r.ok and r.stdout.strip()]
        if running:
            outcome = judge_ptp(kernel, running, s)
        else:
            outcome = judge_kernel(kernel, _run(host, TIMEDATECTL_SHOW), tried, s)
    return _with_kernel(outcome, kernel)


def _with_kernel(outcome: Outcome, kernel: KernelState) -> Outcome:
    details: Dict[str, Any] = dict(outcome.details)
    if isinstance(kernel, KernelTime):
        details["kernel"] = kernel.details()
    elif isinstance(kernel, Unparsable):
        details["kernel"] = {"error": kernel.reason}
    else:
        details["kernel"] = None
    return Outcome(outcome.status, outcome.summary, details, outcome.remediation,
                   code=outcome.code)


FAILURES = (
    Failure(
        UNSYNCHRONISED, Status.FAIL,
        "the time daemon, its server or (PTP) the kernel reports the clock not synchronised",
        "Look at the daemon's sources (`chronyc sources -v`, `timedatectl timesync-status`, "
        "`ntpq -p`; on PTP `pmc -u -b 0 'GET TIME_STATUS_NP'`): open UDP 123 to the servers, "
        "fix the `server`/`pool` lines, and on a large offset step the clock once "
        "(`chronyc makestep`).",
        "chronyc(1) tracking (Leap status); systemd timesyncd-manager.c manager_adjust_clock(); "
        "linux kernel/time/ntp.c (STA_UNSYNC); linuxptp clockadj.c sysclk_set_sync()",
    ),
    Failure(
        OFFSET_OVER_LIMIT, Status.FAIL,
        "the clock is off by time_sync.offset_fail_s (default 1 s) or more",
        "Step the clock once (`chronyc makestep`; timesyncd and ntpd step on restart), then "
        "find why it drifted: a source that disagrees with the others (`chronyc sources -v`), "
        "a virtual or firmware clock, or a second time daemon fighting the first.",
        "chronyc(1) tracking (System time); chrony.conf(5) makestep",
    ),
    Failure(
        OFFSET_OVER_WARNING, Status.WARN,
        "the offset is over time_sync.offset_warn_s (default 100 ms), under the failure limit",
        "Watch the offset converge (`chronyc tracking`); if it stays, compare the sources "
        "(`chronyc sources -v`) and step the clock once (`chronyc makestep`).",
        "chronyc(1) tracking (System time)",
    ),
    Failure(
        NO_REACHABLE_SOURCE, Status.FAIL,
        "no server answers: none configured (ntpd: no associations), none selected, or the "
        "selected one silent for the last time_sync.reach_polls polls",
        "Open UDP 123 from the node to the servers, fix DNS and the `server`/`pool` lines "
        "(chrony.conf(5), timesyncd.conf(5), ntp.conf(5)), and check each source's reach "
        "(`chronyc sources -v`, `ntpq -p`).",
        "RFC 5905 section 9.2 (the reach register); chronyc(1) sources",
    ),
    Failure(
        LOCAL_CLOCK_ONLY, Status.WARN,
        "the daemon is synchronised only to this host's own clock (chrony `local stratum`, "
        "ntpd 127.127.1.x / .LOCL.)",
        "Configure real `server`/`pool` sources; keep `local stratum` for isolated time "
        "servers only.",
        "chrony.conf(5) local; ntp.conf(5) (the undisciplined local clock driver 127.127.1.x)",
    ),
    Failure(
        NO_DAEMON, Status.FAIL,
        "no time daemon answered and the kernel (or timedatectl) reports the clock not "
        "synchronised",
        "Run one time daemon: chrony (`systemctl enable --now chronyd`), systemd-timesyncd "
        "(`timedatectl set-ntp true`) or ntpd; on PTP, phc2sys/ptp4l.",
        "linux kernel/time/ntp.c (STA_UNSYNC, NTP_PHASE_LIMIT 16 s); systemd ntp_synced()",
    ),
    Failure(
        DAEMON_UNREADABLE, Status.UNKNOWN,
        "a time daemon answered, but too late, with an error, or in a format the agent "
        "does not know",
        "Run the command the summary names by hand; if chronyd hangs, restart it "
        "(`systemctl restart chronyd`); a new output format: report it with a bundle "
        "(`gpu-node-agent collect`).",
        "chronyc(1) -c (CSV output); timedatectl(1) timesync-status; ntpq(1) -p",
    ),
    Failure(
        NOTHING_RECORDED, Status.UNKNOWN,
        "the verdict rests on the kernel's clock state (no daemon answered, or PTP), and it "
        "was not captured or could not be read",
        "Run the check on the live host (it calls adjtimex(2)) or capture a bundle with the "
        "`adjtimex` fact (`gpu-node-agent collect`).",
        "adjtimex(2)",
    ),
)

TIME_SYNC = Check(
    id="time-sync",
    title="Clock synchronised by a time daemon with a reachable source",
    severity=Severity.CRITICAL,
    gates=ALL_PATHS,
    interval=Interval.FAST,
    remediation=(
        "Run one time daemon with reachable sources: chrony (`chronyc sources -v`), "
        "systemd-timesyncd (`timedatectl timesync-status`) or ntpd (`ntpq -p`); on PTP, "
        "phc2sys/ptp4l (`pmc -u -b 0 'GET TIME_STATUS_NP'`). Open UDP 123 to the servers, "
        "fix `server`/`pool` lines, and on a large offset step the clock once "
        "(`chronyc makestep`). Do not rely on the local clock (`local stratum`) on a node."
    ),
    run=run,
    failures=FAILURES,
    runs=RUNS,
    facts=("adjtimex",),
    timeout_s=25.0,
    description=(
        "One verdict from chrony, systemd-timesyncd, ntpd/ntpsec or (PTP, no daemon) the "
        "kernel's adjtimex state; see docs/time-sync.md."
    ),
)
