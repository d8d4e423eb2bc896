"""mig-mode: MIG mode applied (current == pending), matching the MIG strategy, with instances.

NVML reports the MIG mode in force and the one pending (nvmlDeviceGetMigMode, nvml.h); a
pending change takes effect at the next GPU reset. The strategy (`gpu.mig_strategy` in the
config: none, single, mixed) is the device plugin's view of MIG: `none` needs MIG off,
`single` needs it on every GPU (docs/gpu-snapshot.md, "How the GPU checks read it"). The DRA
driver takes no strategy (it publishes each MIG device itself), so policy version 2 compares the
word only on the paths in gpu.mig.strategy_paths. Policy version 2 also fails MIG on with no
MIG device (gpu.mig.no_instances): the GPU then offers nothing to either allocator.
"""
from typing import Any, Dict, List, Mapping, Optional

from agent.snapshot import GpuSnapshot
from checks.base import ALL_PATHS, Check, Failure, HostView, Interval, Outcome, Severity, Status
from checks.gpu.common import (
    NVML_REQUIRES,
    SNAPSHOT_DOC,
    Findings,
    each_field,
    gpu_check,
    gpu_label,
    gpu_policy,
    setting,
    snapshot_failures,
)
from checks.gpu.readers import SnapshotError, opt_str, text
from checks.policy import ResolvedPolicy

MIG_PENDING = "mig-change-pending"
STRATEGY_MISMATCH = "mig-strategy-mismatch"
NO_INSTANCES = "mig-no-instances"
FIX = ("Apply the MIG mode the strategy needs (`nvidia-smi -i N -mig 0|1`), then reset the GPU "
       "(`nvidia-smi -r -i N` with no GPU clients; docs/runbook-nvml.md) or reboot so pending "
       "equals current; or change gpu.mig_strategy in the config.")
NO_INSTANCES_FIX = (
    "Create the GPU instances and their compute instances the GPU should offer (`nvidia-smi mig "
    "-i N -cgi <profiles> -C`, or the GPU Operator's MIG manager: label the node "
    "nvidia.com/mig.config), or disable MIG on it (`nvidia-smi -i N -mig 0`, then reset the GPU).")
MIG_GUIDE = ("NVIDIA Multi-Instance GPU User Guide, \"Getting Started with MIG\" (without GPU and "
             "compute instances no CUDA work runs on a MIG-enabled GPU)")


def mig_devices(mig: Mapping[str, Any], where: str) -> Optional[List[Mapping[str, Any]]]:
    """``gpus[i].mig.devices``: None when absent (not read: docs/gpu-snapshot.md), else the MIG
    device objects; SnapshotError naming the field when it is not a list of objects."""
    value = mig.get("devices")
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(d, Mapping) for d in value):
        raise SnapshotError(f"{where}.devices", "a list of objects", value)
    return value


def _mig_mode(host: HostView, policy: ResolvedPolicy, snap: GpuSnapshot) -> Outcome:
    strategy = setting(policy, "gpu", "mig_strategy", "none")
    rules = gpu_policy(policy).mig
    path = getattr(policy, "path", None)
    judge_strategy = path in rules.strategy_paths
    f = Findings()
    enabled: List[int] = []
    counts: Dict[int, int] = {}
    for gpu, mig in each_field(snap, "mig", f):
        label = gpu_label(gpu)
        try:
            current, pending = opt_str(mig, "current", f.where), opt_str(mig, "pending", f.where)
            devices = mig_devices(mig, f.where) if current == "enabled" else None
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
        if devices is not None:
            counts[gpu["index"]] = len(devices)
            if not devices and rules.no_instances == "fail":
                f.fail(NO_INSTANCES, f"{label} has MIG enabled but no MIG device (no GPU "
                                     "instance with a compute instance): nothing to allocate")
        if not judge_strategy:
            continue
        if strategy == "none" and current == "enabled":
            f.fail(STRATEGY_MISMATCH, f"{label} has MIG enabled but the MIG strategy is none")
        if strategy == "single" and current != "enabled":
            f.fail(STRATEGY_MISMATCH, f"{label} has MIG disabled but the MIG strategy is single")
    if judge_strategy and strategy == "single" and f.unsupported:
        gpus = ", ".join(map(str, f.unsupported))
        f.fail(STRATEGY_MISMATCH, f"GPU {gpus} cannot run MIG (strategy single)")
    more: Dict[str, Any] = {}
    if counts:
        more["mig_devices"] = counts
    ok = "MIG current == pending on {n} GPU(s), consistent with strategy " + strategy
    if not judge_strategy:
        # The DRA driver publishes each MIG device itself and reads no strategy word.
        ok = ("MIG current == pending on {n} GPU(s); the MIG strategy is not judged on "
              + str(path) + " (the DRA driver publishes MIG devices itself)")
        more["strategy_judged"] = False
        more["strategy_note"] = (f"gpu.mig_strategy is the device plugin's; on {path} the DRA "
                                 "driver publishes MIG devices itself (gpu.mig.strategy_paths)")
    return f.outcome(ok, "MIG mode", strategy=strategy, mig_enabled_gpus=enabled, **more)


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
                "every GPU); judged on the paths in gpu.mig.strategy_paths", FIX, SNAPSHOT_DOC),
        Failure(NO_INSTANCES, Status.FAIL,
                "a GPU has MIG enabled and no MIG device (policy version 2, "
                "gpu.mig.no_instances: fail)", NO_INSTANCES_FIX, MIG_GUIDE),
    ) + snapshot_failures(),
)
