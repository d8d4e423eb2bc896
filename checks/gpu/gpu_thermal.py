"""gpu-thermal: below the slowdown temperature; no HW slowdown, thermal or power-brake event.

Thresholds are the `gpu.thermal` policy section: nvidia-smi -q "GPU Slowdown Temp" (the GPU
throttles there) and nvml.h's clock-event reasons (nvmlClocksEventReason*), cited in
policy_v1.yaml.
"""
from agent.snapshot import GpuSnapshot
from checks.base import ALL_PATHS, Check, Failure, HostView, Interval, Outcome, Severity, Status
from checks.gpu.common import (
    NVML_REQUIRES,
    Findings,
    each_field,
    gpu_check,
    gpu_label,
    gpu_policy,
    snapshot_failures,
)
from checks.gpu.readers import SnapshotError, opt_int, str_list, sub
from checks.policy import ResolvedPolicy

AT_SLOWDOWN = "at-slowdown-temperature"
NEAR_SLOWDOWN = "near-slowdown-temperature"
CLOCKS_SLOWED = "clocks-slowed"
FIX = ("Check cooling and power: airflow or liquid loop, inlet temperature, PSU and power brake "
       "signals (`nvidia-smi -q -d PERFORMANCE,TEMPERATURE`); HW power brake is an external "
       "signal from the chassis.")
SLOWDOWN_SOURCE = ("nvidia-smi(1) -q \"GPU Slowdown Temp\"; nvml.h "
                   "NVML_TEMPERATURE_THRESHOLD_SLOWDOWN")


def _gpu_thermal(host: HostView, policy: ResolvedPolicy, snap: GpuSnapshot) -> Outcome:
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
                f.fail(AT_SLOWDOWN, f"{label} at {now} C, slowdown threshold {slowdown} C")
            elif now >= limit - tp.warn_margin_c:
                f.warn(NEAR_SLOWDOWN,
                       f"{label} at {now} C, within {tp.warn_margin_c} C of slowdown {slowdown} C")
        active = [r for r in reasons if r in tp.fault_reasons]
        if active:
            f.fail(CLOCKS_SLOWED, f"{label} clocks slowed: {', '.join(active)} active")
    return f.outcome(
        "{n} GPU(s) below their slowdown temperature, no HW slowdown active", "temperature")


GPU_THERMAL = Check(
    id="gpu-thermal",
    title="Below slowdown temperature; no HW slowdown, thermal or power-brake event active",
    severity=Severity.WARNING,
    gates=ALL_PATHS,
    interval=Interval.FAST,
    remediation="Fix cooling or power delivery; see `nvidia-smi -q -d PERFORMANCE,TEMPERATURE`.",
    run=gpu_check(_gpu_thermal),
    uses_gpus=True,
    requires=NVML_REQUIRES,
    failures=(
        Failure(AT_SLOWDOWN, Status.FAIL,
                "a GPU is at or above its slowdown temperature (less gpu.thermal."
                "slowdown_margin_c)", FIX, SLOWDOWN_SOURCE),
        Failure(NEAR_SLOWDOWN, Status.WARN,
                "a GPU is within gpu.thermal.warn_margin_c of its slowdown temperature",
                "Fix cooling or power delivery; see `nvidia-smi -q -d PERFORMANCE,TEMPERATURE`.",
                SLOWDOWN_SOURCE),
        Failure(CLOCKS_SLOWED, Status.FAIL,
                "a hardware or thermal clock-event reason (gpu.thermal.fault_reasons) is active",
                FIX, "nvml.h nvmlClocksEventReason* (HW slowdown, HW thermal, HW power brake, "
                "SW thermal)"),
    ) + snapshot_failures(),
)
