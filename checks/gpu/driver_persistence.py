"""driver-persistence: persistence mode on for every GPU (nvidia-persistenced).

Without it every NVML/CUDA client re-initialises the GPUs, which takes seconds per GPU
(NVIDIA Driver Persistence documentation).
"""
from agent.snapshot import GpuSnapshot
from checks.base import ALL_PATHS, Check, Failure, HostView, Interval, Outcome, Severity, Status
from checks.gpu.common import (
    NVML_REQUIRES,
    Findings,
    each_field,
    gpu_check,
    gpu_label,
    snapshot_failures,
)
from checks.policy import ResolvedPolicy

PERSISTENCE_OFF = "persistence-off"


def _driver_persistence(host: HostView, policy: ResolvedPolicy, snap: GpuSnapshot) -> Outcome:
    f = Findings()
    off = [gpu_label(g) for g, on in each_field(snap, "persistence_mode", f, bool) if not on]
    if off:
        f.fail(PERSISTENCE_OFF, f"persistence mode off on {', '.join(off)}")
    return f.outcome("persistence mode on for {n} GPU(s)", "persistence mode")


DRIVER_PERSISTENCE = Check(
    id="driver-persistence",
    title="Persistence mode on for every GPU (nvidia-persistenced)",
    severity=Severity.WARNING,
    gates=ALL_PATHS,
    interval=Interval.SLOW,
    remediation="`systemctl enable --now nvidia-persistenced`.",
    run=gpu_check(_driver_persistence),
    uses_gpus=True,
    requires=NVML_REQUIRES,
    failures=(
        Failure(PERSISTENCE_OFF, Status.FAIL, "persistence mode is off on a GPU",
                "Enable the NVIDIA persistence daemon: `systemctl enable --now "
                "nvidia-persistenced` (NVIDIA Driver Persistence docs); without it every "
                "NVML/CUDA client re-initialises the GPUs, which takes seconds per GPU.",
                "NVIDIA Driver Persistence documentation; nvml.h nvmlDeviceGetPersistenceMode"),
    ) + snapshot_failures(),
)
