"""gpu-xid: no XID of a sticky class (reset-gpu, reboot) since boot that nothing has cleared;
count/window thresholds for the rest (policy: checks/xid_policy_v1.yaml, docs/xid.md).

Reads the kernel log since boot (host.kmsg()) and the sticky-fault state the daemon keeps
(host.fact("sticky")): the state is what keeps a fault failing after the kernel's ring
buffer has rotated the line out, and its clears (operator `clear`, observed GPU resets) are
what stop an old line from failing the check again. Pure: it writes nothing.
"""

from typing import Any, Dict, List, Set, Tuple

from agent.xid.events import GpuMap, XidEvent, events_from_lines
from agent.xid.state import cleared
from checks.base import (
    ALL_PATHS,
    Check,
    Failure,
    HostView,
    Interval,
    Outcome,
    Severity,
    Status,
    failed,
    passed,
    unknown,
    warned,
)
from checks.gpu.common import gpu_ref
from checks.policy import ResolvedPolicy
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
FIX_REPEATING = (
    "Application-level XIDs are repeating on this GPU: look at the workloads that ran "
    "on it; if different applications hit it, drain and reset the GPU."
)
# By title: generated docs never link outside the repository (URL: xid_policy_v1.yaml header).
CATALOG = 'NVIDIA XID Errors guide, "Analyzing Xid Catalog" (docs.nvidia.com, read 2026-11)'
XID_NEEDS_RESET = "xid-needs-reset"
XID_NEEDS_REBOOT = "xid-needs-reboot"
XID_REPEATING = "xid-repeating"
XID_REPEATING_FAIL = "xid-repeating-fail"
KERNEL_LOG_UNREADABLE = "kernel-log-unreadable"
KERNEL_LOG_UNRECOGNISED = "kernel-log-unrecognised"
FAILURES = (
    Failure(
        XID_NEEDS_RESET, Status.FAIL,
        "an XID of class reset-gpu since boot (or kept in the sticky state) that no GPU reset "
        "or `clear` has cleared",
        FIX_RESET,
        f"NVIDIA XID catalog, Resolution Bucket RESET_GPU ({CATALOG})",
    ),
    Failure(
        XID_NEEDS_REBOOT, Status.FAIL,
        "an XID of class reboot since boot (or kept in the sticky state) on at least one GPU",
        FIX_REBOOT,
        f"NVIDIA XID catalog, Resolution Bucket RESTART_BM ({CATALOG})",
    ),
    Failure(
        XID_REPEATING, Status.WARN,
        "an application-level (restart-app) XID repeated on one GPU at least its threshold's "
        "count within its window (default 10 in 3600 s)",
        FIX_REPEATING,
        f"NVIDIA XID catalog, Resolution Bucket RESTART_APP ({CATALOG}); the count and window "
        "are the policy's (policy.xid thresholds)",
    ),
    Failure(
        XID_REPEATING_FAIL, Status.FAIL,
        "as xid-repeating, for a code whose threshold the policy sets to `status: fail`",
        FIX_REPEATING,
        f"NVIDIA XID catalog, Resolution Bucket RESTART_APP ({CATALOG}); the threshold's status "
        "is the policy's (policy.xid thresholds)",
    ),
    Failure(
        KERNEL_LOG_UNREADABLE, Status.UNKNOWN,
        "the kernel log is not readable (no /dev/kmsg access and no journal), and no sticky "
        "fault is recorded",
        "Run as root (CAP_SYSLOG) or give the agent access to the journal.",
        "linux Documentation/admin-guide/sysctl/kernel.rst (dmesg_restrict); "
        "Documentation/ABI/testing/dev-kmsg",
    ),
    Failure(
        KERNEL_LOG_UNRECOGNISED, Status.UNKNOWN,
        "the kernel log has lines, none of them in a kernel log format",
        "Capture the log again (`gpu-node-agent collect`).",
        "linux Documentation/ABI/testing/dev-kmsg (the record format); dmesg(1)",
    ),
)


def run(host: HostView, policy: ResolvedPolicy) -> Outcome:
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
    refs: Dict[str, Dict[str, Any]] = {}  # GPU name -> the GPU (details["gpus_at_fault"])
    n_cleared = 0
    for ev in events:
        klass = xid.klass(ev.code)
        counts[f"{ev.label()}:{ev.code}"] = counts.get(f"{ev.label()}:{ev.code}", 0) + 1
        if cleared(state, ev.gpu(), klass, ev.mono_us, ev.wall):
            n_cleared += 1
        elif klass in STICKY_CLASSES:
            refs.setdefault(gpu_name(ev.gpu()), ev.gpu())
            entry = fatal.setdefault((gpu_name(ev.gpu()), ev.code), {"class": klass, "count": 0})
            entry["count"] += 1
            entry["message"] = ev.message
        elif klass == "restart-app":
            refs.setdefault(gpu_name(ev.gpu()), ev.gpu())
            soft.append(ev)
    add_state_faults(fatal, state, gpus, refs)
    details: Dict[str, Any] = {
        "kernel_log": lines is not None,
        "sticky_state": sticky is not None,
        "xid_counts": counts,
        "cleared": n_cleared,
        "fatal": [{"gpu": g, "xid": c, **v} for (g, c), v in sorted(fatal.items())],
    }
    if fatal:
        text = fatal_summary(fatal)
        # every fatal XID names its GPU: agent/gpu_health.py counts those unhealthy
        _name_gpus(details, {g for g, _ in fatal}, refs)
        reboot = any(v["class"] == "reboot" for v in fatal.values())
        return failed(text, code=XID_NEEDS_REBOOT if reboot else XID_NEEDS_RESET, **details)
    if lines is None:
        return unknown(
            "kernel log not readable (no /dev/kmsg access and no journal); "
            "sticky state " + ("has no faults" if sticky is not None else "unknown"),
            code=KERNEL_LOG_UNREADABLE,
            **details,
        )
    if lines and not recognised(lines):
        return unknown(
            f"kernel log has {len(lines)} line(s), none in a kernel log format",
            code=KERNEL_LOG_UNRECOGNISED,
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
        failing = {g for g, _, _, th in over if th.status == "fail"}
        if failing:
            # The fail is the GPUs' whose XIDs crossed a `status: fail` threshold (a GPU only
            # over a warning threshold does not fail the check), so they, and only they, are
            # at fault; agent/gpu_health.py keeps this verdict closing the gate (UNFENCED).
            _name_gpus(details, failing, refs)
            return failed(text, code=XID_REPEATING_FAIL, **details)
        return warned(text, code=XID_REPEATING, **details)
    total = sum(counts.values())
    if total:
        return passed(
            f"{total} XID(s) since boot, none needs a GPU reset or reboot"
            + (f" ({n_cleared} cleared)" if n_cleared else ""),
            **details,
        )
    return passed("no XID since boot", **details)


def _name_gpus(details: Dict[str, Any], names: Set[str], refs: Dict[str, Dict[str, Any]]) -> None:
    """details["gpus_at_fault"]: the GPUs ``names`` (gpu_name's) stand for, in name order;
    left out unless every one of them is a GPU the verdict can name (gpu_ref)."""
    named = [gpu_ref(refs.get(g)) for g in sorted(names)]
    if all(r is not None for r in named):
        details["gpus_at_fault"] = named


GPU_XID = Check(
    id="gpu-xid",
    title="No GPU XID that needs a GPU reset or reboot",
    severity=Severity.CRITICAL,
    gates=ALL_PATHS,
    interval=Interval.FAST,
    remediation=FIX_RESET,
    run=run,
    failures=FAILURES,
    reads=("/proc/uptime",),
    facts=("sticky",),
    uses_gpus=True,
    uses_kmsg=True,
    timeout_s=15.0,
    description="XIDs from the kernel log since boot plus the agent's sticky faults; docs/xid.md.",
)
