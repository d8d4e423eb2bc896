"""nvml-responsive: NVML initialises and answers within its deadline.

It owns every NVML-level error in the snapshot (docs/gpu-snapshot.md, ``error.kind``), so
each kind gets its own summary and fix; the GPU health checks then skip naming it.
"""
from typing import Any, Dict, Mapping, Tuple

from agent.records import replace
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
)
from checks.gpu.common import malformed
from checks.gpu.readers import snapshot_problem, text
from checks.operator.state import (
    DRIVER_PRESENCE,
    DRIVER_READS,
    PROC_VERSION,
    driver_discover,
    driver_owned,
    driver_waiting,
    waiting_outcome,
)
from checks.policy import ResolvedPolicy

SNAPSHOT_DOC = "docs/gpu-snapshot.md (\"## Errors\": error.kind)"
NVML_H = "nvml.h (nvmlReturn_t), as the NVML worker maps it into docs/gpu-snapshot.md error.kind"

# kind -> (summary, failure code). Messages name the missing library or driver; each code's
# fix is its declared Failure's.
KINDS: Dict[str, Tuple[str, str]] = {
    "library_not_found": (
        "libnvidia-ml.so.1 not found: the NVIDIA driver's userspace libraries are not installed",
        "library-not-found",
    ),
    "driver_not_loaded": ("NVML: the NVIDIA kernel module is not loaded", "driver-not-loaded"),
    "driver_library_mismatch": (
        "Driver/library version mismatch: the loaded kernel module and libnvidia-ml differ "
        "(NVML error 18)",
        "driver-library-mismatch",
    ),
    "no_permission": (
        "NVML: insufficient permissions to open the NVIDIA device nodes",
        "no-permission",
    ),
    "function_not_found": (
        "NVML: the driver's libnvidia-ml lacks a function NVML needs at init (driver too old)",
        "function-not-found",
    ),
    "timeout": ("driver unresponsive", "nvml-timeout"),
    "worker_stuck": (
        "driver unresponsive: the previous NVML worker is stuck in the driver",
        "worker-stuck",
    ),
    "gpu_lost": ("NVML: a GPU is lost (fell off the bus)", "gpu-lost"),
}
OTHER_KIND = "nvml-failed"  # a kind this table does not know (newer worker, other NVML error)
NOT_A_VERDICT = ("maintenance", "worker_failed", "worker_error")


def _nvml_missing(snap: Any) -> bool:
    if snap is None:
        return True
    err = snap.get("error") if isinstance(snap, Mapping) else None
    return isinstance(err, Mapping) and err.get("kind") not in NOT_A_VERDICT


def _nvml_responsive(host: HostView, policy: ResolvedPolicy) -> Outcome:
    snap = host.gpus()
    if driver_owned(policy) and _nvml_missing(snap):
        # No NVML while the GPU Operator's driver is not there yet is the wait driver-loaded
        # owns (and fails past its grace period), not a fault of NVML. The agent's own states
        # (maintenance during the operator's driver upgrade) keep their summary.
        waiting = driver_waiting(host, policy)
        if waiting is not None:
            return waiting_outcome(waiting, policy, None)
    if snap is None:
        return unknown("GPU snapshot not captured for this host (no gpus.json)",
                       code="snapshot-missing")
    problem = snapshot_problem(snap)  # a field of the wrong type: unknown naming it
    if problem is not None:
        return replace(malformed(problem), code="snapshot-malformed")
    err = snap.get("error")
    if err:
        # text(): printable (a JSON "\ud800" is a lone surrogate no stream can encode)
        kind = text(err.get("kind") or "unknown")
        message = text(err.get("message") or "", 200)
        details: Dict[str, Any] = {
            "kind": kind, "message": message, "nvml_code": err.get("nvml_code"),
        }
        if kind in NOT_A_VERDICT:  # the agent's own state, not the host's: cannot tell
            why = f"NVML not read: {kind}" + (f" ({message})" if message else "")
            return unknown(why, code="nvml-not-read", **details)
        summary, code = KINDS.get(kind, (f"NVML failed: {kind}", OTHER_KIND))
        if message and message not in summary:
            summary += f" ({message})"
        return failed(summary, code=code, **details)
    count = snap.get("device_count", len(snap.get("gpus") or []))
    worker: Mapping[str, Any] = snap.get("worker") or {}
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
    facts=("node",),  # the GPU Operator's upgrade state (checks/operator/state.py)
    uses_gpus=True,
    # Whether the GPU Operator's driver is there yet (module, libraries under its root).
    reads=(PROC_VERSION,) + DRIVER_READS,
    presence=DRIVER_PRESENCE,
    discover=driver_discover,
    # Above any configured NVML first deadline (config gpu.nvml_first_deadline_s <= 80): the
    # NVML client's own deadline decides, so the verdict is "fail: unresponsive", not a
    # generic engine timeout.
    timeout_s=90.0,
    failures=(
        Failure("snapshot-missing", Status.UNKNOWN,
                "no GPU snapshot for this host (gpus.json not captured)",
                "Capture a new bundle on the host (`gpu-node-agent collect`), which records the "
                "NVML snapshot, or run the check on the host itself.", SNAPSHOT_DOC),
        Failure("snapshot-malformed", Status.UNKNOWN,
                "a field of the GPU snapshot has the wrong type",
                "Capture the snapshot again (`gpu-node-agent collect`); a gpus.json edited by "
                "hand must keep the documented schema.", "docs/gpu-snapshot.md (field table)"),
        Failure("nvml-not-read", Status.UNKNOWN,
                "the agent did not read NVML (maintenance, or its NVML worker failed): no "
                "verdict on the host",
                "Wait for the maintenance window to end, or see the agent's log for the NVML "
                "worker's error and re-run the check.", SNAPSHOT_DOC),
        Failure("library-not-found", Status.FAIL,
                "libnvidia-ml.so.1 not found: the driver's userspace libraries are missing",
                "Install the NVIDIA data center driver (its userspace package provides "
                "libnvidia-ml.so.1) and make sure the loader finds it "
                "(`ldconfig -p | grep libnvidia-ml`).", NVML_H),
        Failure("driver-not-loaded", Status.FAIL, "NVML finds no loaded NVIDIA kernel module",
                "Load the driver (`modprobe nvidia`); see driver-loaded.", NVML_H),
        Failure("driver-library-mismatch", Status.FAIL,
                "the loaded kernel module and libnvidia-ml differ (NVML error 18)",
                "The driver packages were upgraded without reloading the module: drain the "
                "node and reboot (or unload and reload the nvidia modules); see "
                "driver-library-match.", NVML_H),
        Failure("no-permission", Status.FAIL,
                "NVML may not open the NVIDIA device nodes",
                "Run the agent as root (the packaged systemd unit does) or grant access to "
                "/dev/nvidia*.", NVML_H),
        Failure("function-not-found", Status.FAIL,
                "the driver's libnvidia-ml lacks a function NVML needs at init (driver too "
                "old)",
                "Install a driver branch at or above the path's minimum (see driver-branch).",
                NVML_H),
        Failure("nvml-timeout", Status.FAIL,
                "NVML did not answer within its deadline: the driver is unresponsive",
                "The driver is wedged: check `dmesg` for XIDs, drain the node, and reset the "
                "GPUs (`nvidia-smi -r` after stopping GPU clients, see docs/runbook-nvml.md) or "
                "reboot.", SNAPSHOT_DOC),
        Failure("worker-stuck", Status.FAIL,
                "the previous NVML worker is stuck in the driver",
                "A process stuck in the NVIDIA driver survives SIGKILL; drain the node and "
                "reboot.", SNAPSHOT_DOC),
        Failure("gpu-lost", Status.FAIL, "NVML reports a GPU lost (fell off the bus)",
                "Drain the node, check `dmesg` for XID 79, reseat or replace the GPU, and "
                "reboot.", NVML_H),
        Failure(OTHER_KIND, Status.FAIL, "NVML failed with an error no other code names",
                "See `dmesg` and the driver logs.", NVML_H),
    ),
)
