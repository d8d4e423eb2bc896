"""nvml-responsive: NVML initialises and answers within its deadline.

It owns every NVML-level error in the snapshot (docs/gpu-snapshot.md, ``error.kind``), so
each kind gets its own summary and fix; the GPU health checks then skip naming it.
"""
from typing import Any, Dict, Tuple

from checks.base import ALL_PATHS, Check, Interval, Outcome, Severity, failed, passed, unknown
from checks.gpu_common import malformed, snapshot_problem, text

# kind -> (summary, remediation). Messages name the missing library or driver.
KINDS: Dict[str, Tuple[str, str]] = {
    "library_not_found": (
        "libnvidia-ml.so.1 not found: the NVIDIA driver's userspace libraries are not installed",
        "Install the NVIDIA data center driver (its userspace package provides libnvidia-ml.so.1) "
        "and make sure the loader finds it (`ldconfig -p | grep libnvidia-ml`).",
    ),
    "driver_not_loaded": (
        "NVML: the NVIDIA kernel module is not loaded",
        "Load the driver (`modprobe nvidia`); see driver-loaded.",
    ),
    "driver_library_mismatch": (
        "Driver/library version mismatch: the loaded kernel module and libnvidia-ml differ "
        "(NVML error 18)",
        "The driver packages were upgraded without reloading the module: drain the node and reboot "
        "(or unload and reload the nvidia modules); see driver-library-match.",
    ),
    "no_permission": (
        "NVML: insufficient permissions to open the NVIDIA device nodes",
        "Run the agent as root (the packaged systemd unit does) or grant access to /dev/nvidia*.",
    ),
    "function_not_found": (
        "NVML: the driver's libnvidia-ml lacks a function NVML needs at init (driver too old)",
        "Install a driver branch at or above the path's minimum (see driver-branch).",
    ),
    "timeout": (
        "driver unresponsive",
        "The driver is wedged: check `dmesg` for XIDs, drain the node, and reset the GPUs "
        "(`nvidia-smi -r` after stopping GPU clients, see docs/runbook-nvml.md) or reboot.",
    ),
    "worker_stuck": (
        "driver unresponsive: the previous NVML worker is stuck in the driver",
        "A process stuck in the NVIDIA driver survives SIGKILL; drain the node and reboot.",
    ),
    "gpu_lost": (
        "NVML: a GPU is lost (fell off the bus)",
        "Drain the node, check `dmesg` for XID 79, reseat or replace the GPU, and reboot.",
    ),
}
NOT_A_VERDICT = ("maintenance", "worker_failed", "worker_error")


def _nvml_responsive(host: Any, policy: Any) -> Outcome:
    snap = host.gpus()
    if snap is None:
        return unknown("GPU snapshot not captured for this host (no gpus.json)")
    problem = snapshot_problem(snap)  # a field of the wrong type: unknown naming it
    if problem is not None:
        return malformed(problem)
    err = snap.get("error")
    if err:
        # text(): printable (a JSON "\ud800" is a lone surrogate no stream can encode)
        kind = text(err.get("kind") or "unknown")
        message = text(err.get("message") or "", 200)
        details = {"kind": kind, "message": message, "nvml_code": err.get("nvml_code")}
        if kind in NOT_A_VERDICT:  # the agent's own state, not the host's: cannot tell
            why = f"NVML not read: {kind}" + (f" ({message})" if message else "")
            return unknown(why, **details)
        summary, fix = KINDS.get(kind, (f"NVML failed: {kind}", "See `dmesg` and the driver logs."))
        if message and message not in summary:
            summary += f" ({message})"
        return failed(summary, fix, **details)
    count = snap.get("device_count", len(snap.get("gpus") or []))
    worker = snap.get("worker") or {}
    took = f" in {worker['wall_s']:.2f}s" if isinstance(worker.get("wall_s"), (int, float)) else ""
    lost = [g.get("index") for g in snap.get("gpus") or [] if g.get("error")]
    return passed(
        f"NVML {text(snap.get('nvml_version') or '?')} answered{took}: {count} GPU(s), "
        f"driver {text(snap.get('driver_version') or '?')}"
        + (f"; GPU {', '.join(map(str, lost))} not readable (see gpu-count)" if lost else ""),
        device_count=count,
        driver_version=snap.get("driver_version"),
        nvml_version=snap.get("nvml_version"),
        cuda_driver_version=snap.get("cuda_driver_version"),
    )


NVML_RESPONSIVE = Check(
    id="nvml-responsive",
    title="NVML initialises and answers within its deadline",
    severity=Severity.CRITICAL,
    gates=ALL_PATHS,
    interval=Interval.FAST,
    remediation="Install and load a matching NVIDIA driver; if NVML hangs, reset the GPUs.",
    run=_nvml_responsive,
    uses_gpus=True,
    # Above any configured NVML first deadline (config gpu.nvml_first_deadline_s <= 80): the
    # NVML client's own deadline decides, so the verdict is "fail: unresponsive", not a
    # generic engine timeout.
    timeout_s=90.0,
)
