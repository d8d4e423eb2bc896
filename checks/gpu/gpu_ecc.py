"""gpu-ecc: no volatile uncorrectable ECC errors; aggregate counts under the policy's thresholds.

Thresholds are the `gpu.ecc` policy section (policy_v1.yaml cites NVIDIA's "GPU Memory Error
Management" and nvml.h for each default).
"""
from typing import Any, List, Set, Tuple

from agent.snapshot import GpuSnapshot
from agent.xid.state import cleared
from checks.base import ALL_PATHS, Check, Failure, HostView, Interval, Outcome, Severity, Status
from checks.gpu.common import (
    DRAIN_RESET,
    MEMORY_ERRORS,
    NVML_REQUIRES,
    Findings,
    each_field,
    gpu_check,
    gpu_label,
    gpu_policy,
    snapshot_failures,
)
from checks.gpu.readers import SnapshotError, count, flag, sub
from checks.policy import ResolvedPolicy
from checks.xid.eval import gpu_name, state_for_boot

VOLATILE_UNCORRECTABLE = "volatile-uncorrectable"
STICKY_FAULT = "sticky-ecc-fault"
ECC_DISABLED = "ecc-disabled"
ECC_MODE_PENDING = "ecc-mode-pending"
AGGREGATE_ERRORS = "aggregate-errors"
FAIL_FIX = (DRAIN_RESET + "; volatile counters clear with the reset. Repeated uncorrectable "
            "errors on one GPU: check gpu-row-remap and open an RMA with NVIDIA.")
WARN_FIX = ("Review the GPU's error history (`nvidia-smi -q -d ECC,ROW_REMAPPER`); enable ECC "
            "(`nvidia-smi -e 1`, then reboot) on data center GPUs.")


def _gpu_ecc(host: HostView, policy: ResolvedPolicy, snap: GpuSnapshot) -> Outcome:
    ep = gpu_policy(policy).ecc
    f = Findings()
    failing: Set[int] = set()
    for gpu, ecc in each_field(snap, "ecc", f):
        label, where = gpu_label(gpu), f.where
        try:
            vol, agg = sub(ecc, "volatile", where), sub(ecc, "aggregate", where)
            mode, pending = flag(ecc, "mode_current", where), flag(ecc, "mode_pending", where)
            vol_unc = count(vol, "uncorrected", f"{where}.volatile")
            agg_unc = count(agg, "uncorrected", f"{where}.aggregate")
            agg_cor = count(agg, "corrected", f"{where}.aggregate")
        except SnapshotError as exc:
            f.malformed(exc)
            continue
        f.per_gpu[gpu["index"]] = {"volatile": vol, "aggregate": agg, "mode": mode}
        if not mode:
            f.warn(ECC_DISABLED, f"{label} ECC disabled")
        elif pending != mode:
            f.warn(ECC_MODE_PENDING, f"{label} ECC mode change pending a reboot")
        if vol_unc > ep.volatile_uncorrected_max:
            failing.add(gpu["index"])
            f.fail(VOLATILE_UNCORRECTABLE,
                   f"{label} {vol_unc} volatile uncorrectable ECC error(s)")
        warn_unc = ep.aggregate_uncorrected_warn_above
        if warn_unc is not None and agg_unc > warn_unc:
            f.warn(AGGREGATE_ERRORS, f"{label} {agg_unc} aggregate uncorrectable ECC error(s)")
        warn_cor = ep.aggregate_corrected_warn_above
        if warn_cor is not None and agg_cor > warn_cor:
            f.warn(AGGREGATE_ERRORS, f"{label} {agg_cor} aggregate corrected ECC error(s)")
    for message, gpu in _sticky_ecc(host, failing):
        f.fail(STICKY_FAULT, message, gpu)
    return f.outcome("no uncorrectable ECC errors on {n} GPU(s)", "ECC counters")


def _sticky_ecc(host: HostView, failing: Set[int]) -> List[Tuple[str, Any]]:
    """ECC faults the daemon recorded this boot and nothing cleared (docs/xid.md): the
    volatile counter can read 0 again after the driver re-initialises the GPU, the fault
    stays until a GPU reset is observed, a reboot, or `gpu-node-agent clear`."""
    state = state_for_boot(host.fact("sticky"), host.boot_id())
    out = []
    for fault in state["faults"]:
        gpu = fault.get("gpu") or {}
        if fault.get("kind") != "ecc" or gpu.get("index") in failing:
            continue
        if cleared(state, gpu, str(fault.get("class", "reset-gpu")),
                   fault.get("last_mono_us"), fault.get("last_at")):
            continue
        out.append((f"{gpu_name(gpu)} {fault.get('message') or 'uncorrectable ECC fault'} "
                    "recorded this boot, not yet reset", gpu))
    return out


GPU_ECC = Check(
    id="gpu-ecc",
    title="No volatile uncorrectable ECC errors; aggregate counts under thresholds",
    severity=Severity.CRITICAL,
    gates=ALL_PATHS,
    interval=Interval.FAST,
    remediation="Drain the node and reset the GPU; RMA on repeated uncorrectable errors.",
    run=gpu_check(_gpu_ecc),
    facts=("sticky",),
    uses_gpus=True,
    requires=NVML_REQUIRES,
    failures=(
        Failure(VOLATILE_UNCORRECTABLE, Status.FAIL,
                "a GPU counted uncorrectable ECC errors since the driver loaded (over "
                "gpu.ecc.volatile_uncorrected_max)", FAIL_FIX, MEMORY_ERRORS),
        Failure(STICKY_FAULT, Status.FAIL,
                "an uncorrectable ECC fault the daemon recorded this boot, not yet cleared by a "
                "GPU reset or reboot (the volatile counter may read 0 again)", FAIL_FIX,
                "docs/xid.md (sticky faults)"),
        Failure(ECC_DISABLED, Status.WARN, "ECC is disabled on a GPU", WARN_FIX, MEMORY_ERRORS),
        Failure(ECC_MODE_PENDING, Status.WARN,
                "an ECC mode change is pending a reboot", WARN_FIX,
                "nvml.h nvmlDeviceGetEccMode (current, pending)"),
        Failure(AGGREGATE_ERRORS, Status.WARN,
                "lifetime (aggregate) ECC error counts above the policy's warn thresholds",
                WARN_FIX, MEMORY_ERRORS),
    ) + snapshot_failures(),
)
