"""gpu-xid: no XID of a sticky class (reset-gpu, reboot) since boot that nothing has cleared;
count/window thresholds for the rest (policy: checks/xid_policy_v1.yaml, docs/xid.md).

Reads the kernel log since boot (host.kmsg()) and the sticky-fault state the daemon keeps
(host.fact("sticky")): the state is what keeps a fault failing after the kernel's ring
buffer has rotated the line out, and its clears (operator `clear`, observed GPU resets) are
what stop an old line from failing the check again. Pure: it writes nothing.
"""

from typing import Any, Dict, List, Tuple

from agent.xid.events import GpuMap, XidEvent, events_from_lines
from agent.xid.state import cleared
from checks.base import (
    ALL_PATHS,
    Check,
    Interval,
    Outcome,
    Severity,
    failed,
    passed,
    unknown,
    warned,
)
from checks.xid.eval import (
    add_state_faults,
    fatal_summary,
    gpu_name,
    over_threshold,
    recognised,
    state_for_boot,
    uptime_us,
)
from checks.xid.policy import STICKY_CLASSES

FIX_RESET = (
    "Drain the GPU's workloads, put the agent in NVML maintenance (`touch "
    "/run/gpu-node-agent/nvml-maintenance`, docs/runbook-nvml.md), reset the GPU (`nvidia-smi -r "
    "-i <index>`), remove the flag; the agent clears the fault when the kernel reports the "
    "reset. After a reset it could not see, or a false alarm: `gpu-node-agent clear <index|uuid>`."
)
FIX_REBOOT = (
    "Drain the node and reboot it (a GPU that fell off the bus does not come back without one); "
    "if it recurs, reseat or replace the GPU. `gpu-node-agent clear` only for a false alarm."
)


def _gpu_xid(host: Any, policy: Any) -> Outcome:
    xid = policy.policy.xid
    lines = host.kmsg()
    sticky = host.fact("sticky")
    state = state_for_boot(sticky, host.boot_id())
    gpus = GpuMap(host.gpus())
    events, resets = events_from_lines(lines or [], gpus)
    # A reset the kernel log shows (XID 154 "to 0x0 (None)") clears reset-gpu faults before it.
    for pci, line in resets:
        clear = {"selector": pci, "pci": [pci], "classes": ["reset-gpu"]}
        state["clears"].append({**clear, "mono_us": line.mono_us, "at": line.wall})
    counts: Dict[str, int] = {}
    fatal: Dict[Tuple[str, int], Dict[str, Any]] = {}
    soft: List[XidEvent] = []
    n_cleared = 0
    for ev in events:
        klass = xid.klass(ev.code)
        counts[f"{ev.label()}:{ev.code}"] = counts.get(f"{ev.label()}:{ev.code}", 0) + 1
        if cleared(state, ev.gpu(), klass, ev.mono_us, ev.wall):
            n_cleared += 1
        elif klass in STICKY_CLASSES:
            entry = fatal.setdefault((gpu_name(ev.gpu()), ev.code), {"class": klass, "count": 0})
            entry["count"] += 1
            entry["message"] = ev.message
        elif klass == "restart-app":
            soft.append(ev)
    add_state_faults(fatal, state, gpus)
    details: Dict[str, Any] = {
        "kernel_log": lines is not None,
        "sticky_state": sticky is not None,
        "xid_counts": counts,
        "cleared": n_cleared,
        "fatal": [{"gpu": g, "xid": c, **v} for (g, c), v in sorted(fatal.items())],
    }
    if fatal:
        text = fatal_summary(fatal)
        reboot = any(v["class"] == "reboot" for v in fatal.values())
        return failed(text, FIX_REBOOT if reboot else FIX_RESET, **details)
    if lines is None:
        return unknown(
            "kernel log not readable (no /dev/kmsg access and no journal); "
            "sticky state " + ("has no faults" if sticky is not None else "unknown"),
            "Run as root (CAP_SYSLOG) or give the agent access to the journal.",
            **details,
        )
    if lines and not recognised(lines):
        return unknown(
            f"kernel log has {len(lines)} line(s), none in a kernel log format",
            "Capture the log again (`gpu-node-agent collect`).",
            **details,
        )
    now_wall = max((e.wall for e in events if e.wall is not None), default=None)
    now_us = uptime_us(host) or max(
        (e.mono_us for e in events if e.mono_us is not None), default=None
    )
    over = over_threshold(soft, xid, now_us, now_wall)
    if over:
        details["over_threshold"] = [{"gpu": g, "xid": c, "count": n} for g, c, n, _ in over]
        text = "; ".join(
            f"{g}: XID {c} x{n} in {th.window_s}s (threshold {th.count})" for g, c, n, th in over
        )[:300]
        fix = (
            "Application-level XIDs are repeating on this GPU: look at the workloads that ran "
            "on it; if different applications hit it, drain and reset the GPU."
        )
        fail = any(th.status == "fail" for *_, th in over)
        return (failed if fail else warned)(text, fix, **details)
    total = sum(counts.values())
    if total:
        return passed(
            f"{total} XID(s) since boot, none needs a GPU reset or reboot"
            + (f" ({n_cleared} cleared)" if n_cleared else ""),
            **details,
        )
    return passed("no XID since boot", **details)


GPU_XID = Check(
    id="gpu-xid",
    title="No GPU XID that needs a GPU reset or reboot",
    severity=Severity.CRITICAL,
    gates=ALL_PATHS,
    interval=Interval.FAST,
    remediation=FIX_RESET,
    run=_gpu_xid,
    reads=("/proc/uptime",),
    facts=("sticky",),
    uses_gpus=True,
    uses_kmsg=True,
    timeout_s=15.0,
    description="XIDs from the kernel log since boot plus the agent's sticky faults; docs/xid.md.",
)
