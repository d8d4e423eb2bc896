"""mig-mode: MIG mode applied (current == pending) and matching the MIG strategy.

NVML reports the MIG mode in force and the one pending (nvmlDeviceGetMigMode, nvml.h); a
pending change takes effect at the next GPU reset. The strategy (`gpu.mig_strategy` in the
config: none, single, mixed) is the device plugin's view of MIG: `none` needs MIG off,
`single` needs it on every GPU (docs/gpu-snapshot.md, "How the GPU checks read it").
"""
from typing import List

from agent.snapshot import GpuSnapshot
from checks.base import ALL_PATHS, Check, Failure, HostView, Interval, Outcome, Severity, Status
from checks.gpu.common import (
    NVML_REQUIRES,
    SNAPSHOT_DOC,
    Findings,
    each_field,
    gpu_check,
    gpu_label,
    setting,
    snapshot_failures,
)
from checks.gpu.readers import SnapshotError, opt_str, text
from checks.policy import ResolvedPolicy

MIG_PENDING = "mig-change-pending"
STRATEGY_MISMATCH = "mig-strategy-mismatch"
FIX = ("Apply the MIG mode the strategy needs (`nvidia-smi -i N -mig 0|1`), then reset the GPU "
       "(`nvidia-smi -r -i N` with no GPU clients; docs/runbook-nvml.md) or reboot so pending "
       "equals current; or change gpu.mig_strategy in the config.")


def _mig_mode(host: HostView, policy: ResolvedPolicy, snap: GpuSnapshot) -> Outcome:
    strategy = setting(policy, "gpu", "mig_strategy", "none")
    f = Findings()
    enabled: List[int] = []
    for gpu, mig in each_field(snap, "mig", f):
        label = gpu_label(gpu)
        try:
            current, pending = opt_str(mig, "current", f.where), opt_str(mig, "pending", f.where)
        except SnapshotError as exc:
            f.malformed(exc)
            continue
        f.per_gpu[gpu["index"]] = mig
        if current != pending:
            f.fail(MIG_PENDING,
                   f"{label} MIG {text(pending or 'unknown')} is pending "
                   f"(current {text(current or 'unknown')}): "
                   "takes effect at the next GPU reset")
            continue
        if current == "enabled":
            enabled.append(gpu["index"])
        if strategy == "none" and current == "enabled":
            f.fail(STRATEGY_MISMATCH, f"{label} has MIG enabled but the MIG strategy is none")
        if strategy == "single" and current != "enabled":
            f.fail(STRATEGY_MISMATCH, f"{label} has MIG disabled but the MIG strategy is single")
    if strategy == "single" and f.unsupported:
        gpus = ", ".join(map(str, f.unsupported))
        f.fail(STRATEGY_MISMATCH, f"GPU {gpus} cannot run MIG (strategy single)")
    return f.outcome(
        "MIG current == pending on {n} GPU(s), consistent with strategy " + strategy, "MIG mode",
        strategy=strategy, mig_enabled_gpus=enabled,
    )


MIG_MODE = Check(
    id="mig-mode",
    title="MIG mode applied (current == pending) and matching the MIG strategy",
    severity=Severity.CRITICAL,
    gates=ALL_PATHS,
    interval=Interval.SLOW,
    remediation="Set MIG mode per the strategy and reset the GPU so it takes effect.",
    run=gpu_check(_mig_mode),
    uses_gpus=True,
    requires=NVML_REQUIRES,
    failures=(
        Failure(MIG_PENDING, Status.FAIL,
                "a GPU's pending MIG mode differs from its current one (applies at the next "
                "GPU reset)", FIX, "nvml.h nvmlDeviceGetMigMode (current, pending)"),
        Failure(STRATEGY_MISMATCH, Status.FAIL,
                "a GPU's MIG mode does not fit gpu.mig_strategy (none: MIG off; single: MIG on "
                "every GPU)", FIX, SNAPSHOT_DOC),
    ) + snapshot_failures(),
)
