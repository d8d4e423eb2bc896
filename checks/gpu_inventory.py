"""GPU inventory: gpu-count, driver-persistence, mig-mode."""
from typing import Any, Dict, List

from checks.base import ALL_PATHS, Check, Interval, Outcome, Severity, failed, passed, warned
from checks.driver import nvidia_gpus_on_pci
from checks.gpu_common import (
    NVML_REQUIRES,
    Findings,
    SnapshotError,
    each_field,
    gpu_label,
    gpus_of,
    malformed,
    opt_int,
    opt_str,
    setting,
    text,
)


# -- gpu-count -------------------------------------------------------------------------
def _gpu_count(host: Any, policy: Any) -> Outcome:
    snap, early = gpus_of(host)
    if early is not None:
        return early
    assert snap is not None
    gpus = snap.get("gpus") or []
    try:
        reported = opt_int(snap, "device_count", "")
    except SnapshotError as exc:
        return malformed(exc)
    nvml_count = len(gpus) if reported is None else reported
    lost = [g for g in gpus if g.get("error")]
    usable = nvml_count - len(lost)
    pci = nvidia_gpus_on_pci(host.fact("pci_devices"))
    expected = policy.setting("expected_gpus")
    details: Dict[str, Any] = {
        "nvml": nvml_count, "usable": usable, "pci": None if pci is None else len(pci),
        "expected": expected, "lost": [g.get("index") for g in lost],
    }
    problems: List[str] = []
    # NVML's "00000000:1A:00.0" vs udev's "0000:1a:00.0": compare domain:bus:dev.fn, lowercase.
    readable = {str(g.get("pci_bus_id") or "").lower()[-12:] for g in gpus if not g.get("error")}
    missing = [d["slot"] for d in pci or [] if str(d.get("slot", "")).lower()[-12:] not in readable]
    for gpu in lost:
        err = gpu["error"]
        problems.append(f"{gpu_label(gpu)} not usable: {text(err.get('kind'))} "
                        f"({text(err.get('message'), 200)})")
    if lost and pci is not None and len(missing) == len(lost):
        problems[-1] += f"; PCI {', '.join(missing)} unreadable in NVML"
    if pci is not None and len(pci) != nvml_count:
        problems.append(
            f"{len(pci)} NVIDIA GPU(s) on PCI but NVML sees {nvml_count}"
            + (f" (not in NVML: {', '.join(missing)})"
               if missing and len(missing) < len(pci) else ""))
        details["pci_not_in_nvml"] = missing
    if expected is not None and usable != expected:
        problems.append(f"{usable} usable GPU(s), config expects {expected}")
    if problems:
        return failed(
            "; ".join(problems),
            "A GPU on PCI that NVML cannot use has usually fallen off the bus (XID 79) or failed "
            "to initialise: check `dmesg`, drain the node, reseat or replace the GPU and reboot. "
            "If the count is right, correct expected_gpus in the config.",
            **details,
        )
    if nvml_count == 0:
        return failed("no NVIDIA GPU: NVML sees 0 and none on PCI", **details)
    if pci is None and expected is None:
        return warned(
            f"NVML sees {nvml_count} GPU(s); PCI inventory not available to cross-check "
            "(set expected_gpus to pin the count)",
            **details,
        )
    seen = (f"{nvml_count} GPU(s) on PCI and in NVML" if pci is not None
            else f"NVML sees {nvml_count} GPU(s)")
    return passed(seen + (f", as expected ({expected})" if expected is not None else ""), **details)


GPU_COUNT = Check(
    id="gpu-count",
    title="GPUs on PCI == GPUs NVML sees (== expected_gpus)",
    severity=Severity.CRITICAL,
    gates=ALL_PATHS,
    interval=Interval.FAST,
    remediation="Find the missing GPU (dmesg, XID 79), drain, reseat or replace it, reboot.",
    run=_gpu_count,
    facts=("pci_devices",),
    uses_gpus=True,
    requires=NVML_REQUIRES,
    timeout_s=10.0,
)


# -- driver-persistence ----------------------------------------------------------------
def _driver_persistence(host: Any, policy: Any) -> Outcome:
    snap, early = gpus_of(host)
    if early is not None:
        return early
    assert snap is not None
    f = Findings()
    off = [gpu_label(g) for g, on in each_field(snap, "persistence_mode", f, bool) if not on]
    if off:
        f.failures.append(f"persistence mode off on {', '.join(off)}")
    return f.outcome(
        "persistence mode on for {n} GPU(s)", "persistence mode",
        "Enable the NVIDIA persistence daemon: `systemctl enable --now nvidia-persistenced` "
        "(NVIDIA Driver Persistence docs); without it every NVML/CUDA client re-initialises "
        "the GPUs, which takes seconds per GPU.",
    )


DRIVER_PERSISTENCE = Check(
    id="driver-persistence",
    title="Persistence mode on for every GPU (nvidia-persistenced)",
    severity=Severity.WARNING,
    gates=ALL_PATHS,
    interval=Interval.SLOW,
    remediation="`systemctl enable --now nvidia-persistenced`.",
    run=_driver_persistence,
    uses_gpus=True,
    requires=NVML_REQUIRES,
)


# -- mig-mode --------------------------------------------------------------------------
def _mig_mode(host: Any, policy: Any) -> Outcome:
    snap, early = gpus_of(host)
    if early is not None:
        return early
    assert snap is not None
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
            f.failures.append(
                f"{label} MIG {text(pending or 'unknown')} is pending "
                f"(current {text(current or 'unknown')}): "
                "takes effect at the next GPU reset")
            continue
        if current == "enabled":
            enabled.append(gpu["index"])
        if strategy == "none" and current == "enabled":
            f.failures.append(f"{label} has MIG enabled but the MIG strategy is none")
        if strategy == "single" and current != "enabled":
            f.failures.append(f"{label} has MIG disabled but the MIG strategy is single")
    if strategy == "single" and f.unsupported:
        gpus = ", ".join(map(str, f.unsupported))
        f.failures.append(f"GPU {gpus} cannot run MIG (strategy single)")
    return f.outcome(
        "MIG current == pending on {n} GPU(s), consistent with strategy " + strategy, "MIG mode",
        "Apply the MIG mode the strategy needs (`nvidia-smi -i N -mig 0|1`), then reset the "
        "GPU (`nvidia-smi -r -i N` with no GPU clients; docs/runbook-nvml.md) or reboot so "
        "pending equals current; or change gpu.mig_strategy in the config.",
        strategy=strategy, mig_enabled_gpus=enabled,
    )


MIG_MODE = Check(
    id="mig-mode",
    title="MIG mode applied (current == pending) and matching the MIG strategy",
    severity=Severity.CRITICAL,
    gates=ALL_PATHS,
    interval=Interval.SLOW,
    remediation="Set MIG mode per the strategy and reset the GPU so it takes effect.",
    run=_mig_mode,
    uses_gpus=True,
    requires=NVML_REQUIRES,
)
