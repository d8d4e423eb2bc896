"""time-sync verdicts, one per source of truth (chrony, timesyncd, ntpd, PTP, the kernel).

The no-flap rule (docs/time-sync.md): a selected source counts as reachable while its reach
register shows a reply in the last ``reach_polls`` polls (default 4). The register shifts
left once per poll and sets bit 0 on a reply (RFC 5905 section 9.2), so up to N-1 lost
packets in a row never change the verdict, and a source that went silent fails after N
polls, long before chronyd itself gives up on it (8 polls) while its tracking report still
says "Normal" (measured against a real chronyd: tests/integration/test_chrony_real.py).
"""
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Union

from checks.base import CommandResult, Outcome, failed, passed, unknown, warned
from checks.time.parsers import (
    MAXERROR_LIMIT_US,
    KernelTime,
    Source,
    Unparsable,
    ntpq_local_clock,
    parse_chrony_sources,
    parse_chrony_tracking,
    parse_key_values,
    parse_ntpq_peers,
    parse_timesync_status,
)

TRACKING = ("chronyc", "-c", "tracking")
# The distinct ways time-sync does not pass (declared with their fixes on TIME_SYNC in
# checks/time/time_sync.py; docs/time-sync.md "Verdicts").
UNSYNCHRONISED = "unsynchronised"
OFFSET_OVER_LIMIT = "offset-over-limit"
OFFSET_OVER_WARNING = "offset-over-warning"
NO_REACHABLE_SOURCE = "no-reachable-source"
LOCAL_CLOCK_ONLY = "local-clock-only"
NO_DAEMON = "no-daemon"
DAEMON_UNREADABLE = "daemon-unreadable"
NOTHING_RECORDED = "nothing-recorded"
KernelState = Union[KernelTime, Unparsable, None]
_STATE_WORDS = {"*": "selected", "+": "combined", "-": "not combined", "?": "unreachable",
                "x": "falseticker", "~": "too variable", " ": "rejected"}


class Settings(NamedTuple):
    offset_warn_s: float
    offset_fail_s: float
    chrony_socket: Optional[str]
    reach_polls: int


def fmt_seconds(value: float) -> str:
    mag = abs(value)
    if mag < 1e-3:
        return f"{value * 1e6:+.1f} us"
    if mag < 1.0:
        return f"{value * 1e3:+.1f} ms"
    return f"{value:+.3f} s"


def _offset_verdict(what: str, offset: Optional[float], s: Settings,
                    details: Dict[str, Any]) -> Outcome:
    if offset is None:
        return passed(what, **details)
    mag = abs(offset)
    if mag >= s.offset_fail_s:
        return failed(f"{what}, but the clock is off by {fmt_seconds(offset)} "
                      f"(limit {s.offset_fail_s:g} s)", code=OFFSET_OVER_LIMIT, **details)
    if mag >= s.offset_warn_s:
        return warned(f"{what}, offset {fmt_seconds(offset)} over the warning limit "
                      f"{s.offset_warn_s:g} s", code=OFFSET_OVER_WARNING, **details)
    return passed(f"{what}, offset {fmt_seconds(offset)}", **details)


def _recent(source: Source, s: Settings) -> bool:
    return bool(source.reach & ((1 << s.reach_polls) - 1))


def sources_text(sources: Sequence[Source]) -> str:
    if not sources:
        return "no sources configured"
    shown = [f"{x.name} {_STATE_WORDS.get(x.state, x.state)}, reach {x.reach:03o}"
             for x in sources[:4]]
    more = f", +{len(sources) - 4} more" if len(sources) > 4 else ""
    return "; ".join(shown) + more


def _source_details(sources: Sequence[Source]) -> List[Dict[str, Any]]:
    return [{"name": x.name, "state": x.state, "stratum": x.stratum,
             "reach": f"{x.reach:03o}", "offset_s": x.offset_s} for x in sources]


def _selected_source(daemon: str, sources: Sequence[Source], s: Settings,
                     details: Dict[str, Any]) -> Union[Source, Outcome]:
    selected = [x for x in sources if x.selected]
    if not selected:
        return failed(f"{daemon} has no selected source ({sources_text(sources)})",
                      code=NO_REACHABLE_SOURCE, **details)
    sel = selected[0]
    if not _recent(sel, s):
        return failed(
            f"{daemon}'s selected source {sel.name} has not answered in its last "
            f"{s.reach_polls} polls (reach {sel.reach:03o})", code=NO_REACHABLE_SOURCE, **details)
    return sel


def judge_chrony(tracking: CommandResult, sources: CommandResult, s: Settings) -> Outcome:
    t = parse_chrony_tracking(tracking.stdout)
    if isinstance(t, Unparsable):
        return unknown(f"unrecognised `chronyc -c tracking` output: {t.reason}",
                       code=DAEMON_UNREADABLE, daemon="chrony")
    if not sources.ok:
        return unknown(f"cannot list chrony's sources: {sources.describe()}",
                       code=DAEMON_UNREADABLE, daemon="chrony")
    src = parse_chrony_sources(sources.stdout)
    if isinstance(src, Unparsable):
        return unknown(f"unrecognised `chronyc -c sources` output: {src.reason}",
                       code=DAEMON_UNREADABLE, daemon="chrony")
    details: Dict[str, Any] = {
        "daemon": "chrony", "source": t.name or None, "refid": t.refid, "stratum": t.stratum,
        "offset_s": t.offset_s, "leap": t.leap, "root_dispersion_s": t.root_dispersion_s,
        "sources": _source_details(src), "reach_polls": s.reach_polls,
    }
    if not t.synchronised:
        return failed(f"chrony is not synchronised ({sources_text(src)})", code=UNSYNCHRONISED,
                      **details)
    if t.local_only:
        return warned(
            f"chrony is synchronised only to this host's own clock (local stratum "
            f"{t.stratum}, reference {t.refid}); sources: {sources_text(src)}",
            code=LOCAL_CLOCK_ONLY, **details)
    sel = _selected_source("chrony", src, s, details)
    if isinstance(sel, Outcome):
        return sel
    return _offset_verdict(f"chrony synchronised to {sel.name} (stratum {t.stratum})",
                           t.offset_s, s, details)


def judge_timesyncd(status: CommandResult, show: CommandResult, kernel: KernelState,
                    s: Settings) -> Outcome:
    """timesyncd keeps no reach register; it sets the kernel's state on every update
    (systemd timesyncd-manager.c, manager_adjust_clock), so the kernel state is its
    staleness signal: maxerror grows by 500 us/s after the last update (kernel ntp.c)."""
    st = parse_timesync_status(status.stdout)
    if isinstance(st, Unparsable):
        return unknown(f"unrecognised `timedatectl timesync-status` output: {st.reason}",
                       code=DAEMON_UNREADABLE, daemon="timesyncd")
    kv = parse_key_values(show.stdout) if show.ok else {}
    kernel_sync = kernel.synchronised if isinstance(kernel, KernelTime) else (
        {"yes": True, "no": False}.get(kv.get("NTPSynchronized", "")))
    details: Dict[str, Any] = {
        "daemon": "timesyncd", "source": st.server, "stratum": st.stratum,
        "offset_s": st.offset_s, "leap": st.leap, "packets": st.packets,
        "kernel_synchronised": kernel_sync,
    }
    if st.server in ("", "n/a", "null") or not st.packets:
        return failed("systemd-timesyncd has no reply from any server "
                      f"(server {st.server or 'none'})", code=NO_REACHABLE_SOURCE, **details)
    if st.leap.startswith("not sync") or st.stratum in (0, 16):
        return failed(f"systemd-timesyncd's server {st.server} is not synchronised itself",
                      code=UNSYNCHRONISED, **details)
    if kernel_sync is False:
        return failed(f"systemd-timesyncd has server {st.server} but the kernel clock is not "
                      "synchronised (no update for hours, or never)", code=UNSYNCHRONISED,
                      **details)
    return _offset_verdict(f"systemd-timesyncd synchronised to {st.server} "
                           f"(stratum {st.stratum})", st.offset_s, s, details)


def judge_ntpd(peers: CommandResult, s: Settings) -> Outcome:
    p = parse_ntpq_peers(peers.stdout)
    if isinstance(p, Unparsable):
        return unknown(f"unrecognised `ntpq -pn` output: {p.reason}", code=DAEMON_UNREADABLE,
                       daemon="ntpd")
    details: Dict[str, Any] = {"daemon": "ntpd", "sources": _source_details(p),
                               "reach_polls": s.reach_polls}
    sel = _selected_source("ntpd", p, s, details)
    if isinstance(sel, Outcome):
        return sel
    details.update(source=sel.name, stratum=sel.stratum, offset_s=sel.offset_s)
    if ntpq_local_clock(sel):
        return warned(f"ntpd is synchronised only to this host's own clock ({sel.name})",
                      code=LOCAL_CLOCK_ONLY, **details)
    return _offset_verdict(f"ntpd synchronised to {sel.name} (stratum {sel.stratum})",
                           sel.offset_s, s, details)


def _kernel_why(k: KernelTime) -> str:
    if "STA_UNSYNC" in k.flags:
        return "STA_UNSYNC set"
    return f"maxerror {k.maxerror_us / 1e6:.1f} s >= {MAXERROR_LIMIT_US // 1000000} s"


def judge_ptp(kernel: KernelState, running: Sequence[str], s: Settings) -> Outcome:
    names = "/".join(running)
    details: Dict[str, Any] = {"daemon": "ptp", "processes": list(running), "offset_s": None}
    if isinstance(kernel, Unparsable):
        return unknown(f"PTP ({names}) running; kernel clock state unreadable: {kernel.reason}",
                       code=NOTHING_RECORDED, **details)
    if not isinstance(kernel, KernelTime):
        return unknown(f"PTP ({names}) running; the kernel's clock state was not captured",
                       code=NOTHING_RECORDED, **details)
    details["offset_s"] = kernel.offset_s
    if not kernel.synchronised:
        return failed(f"PTP ({names}) running but the kernel clock is not synchronised "
                      f"({_kernel_why(kernel)})", code=UNSYNCHRONISED, **details)
    return _offset_verdict(
        f"PTP ({names}) keeps the kernel clock synchronised (maxerror "
        f"{kernel.maxerror_us / 1000:.1f} ms)", kernel.offset_s, s, details)


def judge_kernel(kernel: KernelState, show: CommandResult, tried: Sequence[str],
                 s: Settings) -> Outcome:
    details: Dict[str, Any] = {"daemon": None, "tried": list(tried), "offset_s": None}
    if isinstance(kernel, Unparsable):
        return unknown(f"no time daemon answered; kernel clock state unreadable: "
                       f"{kernel.reason}", code=NOTHING_RECORDED, **details)
    if isinstance(kernel, KernelTime):
        details["offset_s"] = kernel.offset_s
        if not kernel.synchronised:
            return failed(f"no time daemon answered and the kernel clock is not synchronised "
                          f"({_kernel_why(kernel)})", code=NO_DAEMON, **details)
        return _offset_verdict(
            f"no time daemon answered; the kernel reports the clock synchronised (maxerror "
            f"{kernel.maxerror_us / 1000:.1f} ms < 16 s)", kernel.offset_s, s, details)
    flag = parse_key_values(show.stdout).get("NTPSynchronized") if show.ok else None
    if flag == "yes":
        return passed("no time daemon answered; timedatectl reports NTPSynchronized=yes",
                      **details)
    if flag == "no":
        return failed("no time daemon answered and timedatectl reports NTPSynchronized=no",
                      code=NO_DAEMON, **details)
    return unknown("no time daemon answered and the kernel's clock state was not captured ("
                   + "; ".join(tried[:3]) + ")", code=NOTHING_RECORDED, **details)
