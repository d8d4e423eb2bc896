"""gpu-row-remap: no row remap failure (fail) and no pending remap (warn).

NVIDIA "GPU Memory Error Management", "Row Remapping": a pending remap takes effect at the
next GPU reset; a remapping failure means a bank ran out of spare rows (RMA). The statuses
are the `gpu.row_remap` policy section (policy_v1.yaml).
"""
from agent.snapshot import GpuSnapshot
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
from checks.gpu.readers import SnapshotError, flag
from checks.policy import ResolvedPolicy

REMAP_FAILURE = "remap-failure"
REMAP_PENDING = "remap-pending"


def _gpu_row_remap(host: HostView, policy: ResolvedPolicy, snap: GpuSnapshot) -> Outcome:
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
        # The policy says whether each is a warn or a fail; the code names what was found.
        if failure:
            (f.fail if rp.failure == "fail" else f.warn)(
                REMAP_FAILURE, f"{label} row remapping failed (no spare rows left)")
        if pending:
            (f.fail if rp.pending == "fail" else f.warn)(
                REMAP_PENDING, f"{label} row remap pending: needs a GPU reset")
    return f.outcome("no pending or failed row remaps on {n} GPU(s)", "remapped rows")


GPU_ROW_REMAP = Check(
    id="gpu-row-remap",
    title="No row remap failure (fail) and no pending remap (warn)",
    severity=Severity.CRITICAL,
    gates=ALL_PATHS,
    interval=Interval.FAST,
    remediation="Pending: reset the GPU. Failure: drain and RMA the GPU.",
    run=gpu_check(_gpu_row_remap),
    uses_gpus=True,
    requires=NVML_REQUIRES,
    failures=(
        # Statuses as the default policy has them (gpu.row_remap: failure fail, pending warn).
        Failure(REMAP_FAILURE, Status.FAIL,
                "row remapping failed on a GPU: a bank ran out of spare rows",
                "A remapping failure means the GPU ran out of spare rows: drain the node and "
                "open an RMA with NVIDIA (GPU Memory Error Management, \"Row Remapping\").",
                MEMORY_ERRORS + ", \"Row Remapping\""),
        Failure(REMAP_PENDING, Status.WARN,
                "a row remap is pending on a GPU: it takes effect at the next GPU reset",
                DRAIN_RESET + " so the pending remap takes effect.",
                MEMORY_ERRORS + ", \"Row Remapping\""),
    ) + snapshot_failures(),
)
