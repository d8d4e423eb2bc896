"""GPU memory and thermal health: gpu-ecc, gpu-row-remap, gpu-thermal.

Thresholds are the `gpu` policy section (policy_v1.yaml cites NVIDIA's "GPU Memory Error
Management" and nvml.h for each default).
"""
from typing import Any, List, Set

from agent.xid.state import cleared
from checks.base import ALL_PATHS, Check, Interval, Outcome, Severity
from checks.gpu_common import (
    NVML_REQUIRES,
    Findings,
    SnapshotError,
    count,
    each_field,
    flag,
    gpu_label,
    gpu_policy,
    gpus_of,
    opt_int,
    str_list,
    sub,
)
from checks.xid.eval import gpu_name, state_for_boot

DRAIN_RESET = (
    "Drain the node, then reset the GPU (`nvidia-smi -r -i N` with no GPU clients; "
    "docs/runbook-nvml.md) or reboot"
)


# -- gpu-ecc ---------------------------------------------------------------------------
def _gpu_ecc(host: Any, policy: Any) -> Outcome:
    snap, early = gpus_of(host)
    if early is not None:
        return early
    assert snap is not None
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
            f.warnings.append(f"{label} ECC disabled")
        elif pending != mode:
            f.warnings.append(f"{label} ECC mode change pending a reboot")
        if vol_unc > ep.volatile_uncorrected_max:
            failing.add(gpu["index"])
            f.failures.append(f"{label} {vol_unc} volatile uncorrectable ECC error(s)")
        warn_unc = ep.aggregate_uncorrected_warn_above
        if warn_unc is not None and agg_unc > warn_unc:
            f.warnings.append(f"{label} {agg_unc} aggregate uncorrectable ECC error(s)")
        warn_cor = ep.aggregate_corrected_warn_above
        if warn_cor is not None and agg_cor > warn_cor:
            f.warnings.append(f"{label} {agg_cor} aggregate corrected ECC error(s)")
    f.failures.extend(_sticky_ecc(host, failing))
    return f.outcome(
        "no uncorrectable ECC errors on {n} GPU(s)", "ECC counters",
        DRAIN_RESET + "; volatile counters clear with the reset. Repeated uncorrectable errors "
        "on one GPU: check gpu-row-remap and open an RMA with NVIDIA.",
        "Review the GPU's error history (`nvidia-smi -q -d ECC,ROW_REMAPPER`); enable ECC "
        "(`nvidia-smi -e 1`, then reboot) on data center GPUs.",
    )


def _sticky_ecc(host: Any, failing: Set[int]) -> List[str]:
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
        out.append(f"{gpu_name(gpu)} {fault.get('message') or 'uncorrectable ECC fault'} "
                   "recorded this boot, not yet reset")
    return out


GPU_ECC = Check(
    id="gpu-ecc",
    title="No volatile uncorrectable ECC errors; aggregate counts under thresholds",
    severity=Severity.CRITICAL,
    gates=ALL_PATHS,
    interval=Interval.FAST,
    remediation="Drain the node and reset the GPU; RMA on repeated uncorrectable errors.",
    run=_gpu_ecc,
    facts=("sticky",),
    uses_gpus=True,
    requires=NVML_REQUIRES,
)


# -- gpu-row-remap ---------------------------------------------------------------------
def _gpu_row_remap(host: Any, policy: Any) -> Outcome:
    snap, early = gpus_of(host)
    if early is not None:
        return early
    assert snap is not None
    rp = gpu_policy(policy).row_remap
    f = Findings()
    for gpu, rows in each_field(snap, "remapped_rows", f):
        label = gpu_label(gpu)
        try:
            failure, pending = flag(rows, "failure", f.where), flag(rows, "pending", f.where)
        except SnapshotError as exc:
            f.malformed(exc)
            continue
        f.per_gpu[gpu["index"]] = rows
        if failure:
            bucket = f.failures if rp.failure == "fail" else f.warnings
            bucket.append(f"{label} row remapping failed (no spare rows left)")
        if pending:
            bucket = f.failures if rp.pending == "fail" else f.warnings
            bucket.append(f"{label} row remap pending: needs a GPU reset")
    return f.outcome(
        "no pending or failed row remaps on {n} GPU(s)", "remapped rows",
        "A remapping failure means the GPU ran out of spare rows: drain the node and open an "
        "RMA with NVIDIA (GPU Memory Error Management, \"Row Remapping\").",
        DRAIN_RESET + " so the pending remap takes effect.",
    )


GPU_ROW_REMAP = Check(
    id="gpu-row-remap",
    title="No row remap failure (fail) and no pending remap (warn)",
    severity=Severity.CRITICAL,
    gates=ALL_PATHS,
    interval=Interval.FAST,
    remediation="Pending: reset the GPU. Failure: drain and RMA the GPU.",
    run=_gpu_row_remap,
    uses_gpus=True,
    requires=NVML_REQUIRES,
)


# -- gpu-thermal -----------------------------------------------------------------------
def _gpu_thermal(host: Any, policy: Any) -> Outcome:
    snap, early = gpus_of(host)
    if early is not None:
        return early
    assert snap is not None
    tp = gpu_policy(policy).thermal
    f = Findings()
    for gpu, temp in each_field(snap, "temperature", f):
        label = gpu_label(gpu)
        try:
            now, slowdown = opt_int(temp, "gpu_c", f.where), opt_int(temp, "slowdown_c", f.where)
            events = sub(gpu, "clock_event_reasons", f.gpu_where)
            reasons = str_list(events, "active", f"{f.gpu_where}.clock_event_reasons")
        except SnapshotError as exc:
            f.malformed(exc)
            continue
        f.per_gpu[gpu["index"]] = temp
        if now is not None and slowdown is not None:
            limit = slowdown - tp.slowdown_margin_c
            if now >= limit:
                f.failures.append(f"{label} at {now} C, slowdown threshold {slowdown} C")
            elif now >= limit - tp.warn_margin_c:
                f.warnings.append(
                    f"{label} at {now} C, within {tp.warn_margin_c} C of slowdown {slowdown} C")
        active = [r for r in reasons if r in tp.fault_reasons]
        if active:
            f.failures.append(f"{label} clocks slowed: {', '.join(active)} active")
    return f.outcome(
        "{n} GPU(s) below their slowdown temperature, no HW slowdown active", "temperature",
        "Check cooling and power: airflow or liquid loop, inlet temperature, PSU and power "
        "brake signals (`nvidia-smi -q -d PERFORMANCE,TEMPERATURE`); HW power brake is an "
        "external signal from the chassis.",
    )


GPU_THERMAL = Check(
    id="gpu-thermal",
    title="Below slowdown temperature; no HW slowdown, thermal or power-brake event active",
    severity=Severity.WARNING,
    gates=ALL_PATHS,
    interval=Interval.FAST,
    remediation="Fix cooling or power delivery; see `nvidia-smi -q -d PERFORMANCE,TEMPERATURE`.",
    run=_gpu_thermal,
    uses_gpus=True,
    requires=NVML_REQUIRES,
)
