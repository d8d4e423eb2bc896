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
    Interval,
    Outcome,
    Severity,
    failed,
    unknown,
)
from checks.time.daemons import (
    TRACKING,
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


def settings_of(policy: Any) -> Settings:
    raw: Dict[str, Any] = {}
    if policy is not None and hasattr(policy, "setting"):
        raw = policy.setting("time_sync") or {}
    fail = float(raw.get("offset_fail_s", 1.0))
    warn = min(float(raw.get("offset_warn_s", 0.1)), fail)  # warn past fail means fail only
    return Settings(warn, fail, raw.get("chrony_socket"), int(raw.get("reach_polls", 4)))


def _chrony_argv(argv: Tuple[str, ...], socket: Optional[str]) -> Tuple[str, ...]:
    return (argv[0], "-h", socket, *argv[1:]) if socket else argv


def _run(host: Any, argv: Tuple[str, ...]) -> Any:
    return host.run(list(argv), timeout=TIMEOUT)


def _ask_chrony(host: Any, s: Settings, tried: List[str]) -> Optional[Outcome]:
    tracking = _run(host, _chrony_argv(TRACKING, s.chrony_socket))
    if tracking.not_recorded and s.chrony_socket:
        # collect records the declared argv only; a bundle holds the plain form.
        tracking = _run(host, TRACKING)
        sources = _run(host, CHRONY_SOURCES)
    else:
        sources = _run(host, _chrony_argv(CHRONY_SOURCES, s.chrony_socket)) if tracking.ok else None
    if tracking.timed_out:
        return unknown(f"chronyd did not answer in time: {tracking.describe()}", daemon="chrony")
    if not tracking.ok or sources is None:
        tried.append(tracking.describe())
        return None
    return judge_chrony(tracking, sources, s)


def _ask_timesyncd(host: Any, s: Settings, kernel: Any, tried: List[str]) -> Optional[Outcome]:
    status = _run(host, TIMESYNC_STATUS)
    if not status.ok:
        tried.append(status.describe())
        return None
    return judge_timesyncd(status, _run(host, TIMEDATECTL_SHOW), kernel, s)


def _ask_ntpd(host: Any, s: Settings, tried: List[str]) -> Optional[Outcome]:
    peers = _run(host, NTPQ_PEERS)
    # ntpq reports "Connection refused" / "timed out" on stderr when ntpd is not running,
    # with an exit status that differs between ntp and ntpsec: no output = no ntpd.
    if not peers.ok or not peers.stdout.strip():
        tried.append(peers.describe() if not peers.ok else "`ntpq -pn`: no answer from ntpd")
        return None
    if "No association" in peers.stdout:
        return failed("ntpd answers but has no associations (no servers configured)",
                      daemon="ntpd")
    return judge_ntpd(peers, s)


def _time_sync(host: Any, policy: Any) -> Outcome:
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


def _with_kernel(outcome: Outcome, kernel: Any) -> Outcome:
    details: Dict[str, Any] = dict(outcome.details)
    if isinstance(kernel, KernelTime):
        details["kernel"] = kernel.details()
    elif isinstance(kernel, Unparsable):
        details["kernel"] = {"error": kernel.reason}
    else:
        details["kernel"] = None
    return Outcome(outcome.status, outcome.summary, details, outcome.remediation)


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
    run=_time_sync,
    runs=RUNS,
    facts=("adjtimex",),
    timeout_s=25.0,
    description=(
        "One verdict from chrony, systemd-timesyncd, ntpd/ntpsec or (PTP, no daemon) the "
        "kernel's adjtimex state; see docs/time-sync.md."
    ),
)
