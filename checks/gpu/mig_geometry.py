"""mig-geometry: the MIG geometry NVML reports is the one the config states (policy version 2).

`gpu.mig_geometry` (agent/config.py) states the GPU instance profiles a GPU should carry, keyed
by NVML index ("0") or product name (nvmlDeviceGetName, "NVIDIA H100 80GB HBM3"); an index key
beats a product key. A GPU's geometry is the multiset of its GPU instances' profiles: one per
distinct gpu_instance_id among gpus[i].mig.devices (a GPU instance split into several compute
instances is still one instance; docs/gpu-snapshot.md). Order does not matter: placement is the
driver's. Unset: not applicable.
"""
from collections import Counter
from typing import Any, Dict, List, Mapping, Optional, Tuple

from agent.snapshot import GpuSnapshot
from checks.base import (
    ALL_PATHS,
    Check,
    Failure,
    HostView,
    Interval,
    Outcome,
    Severity,
    Status,
    not_applicable,
)
from checks.gpu.common import (
    FIELD_UNREADABLE,
    NVML_REQUIRES,
    Findings,
    each_field,
    gpu_check,
    gpu_label,
    setting,
    snapshot_failures,
)
from checks.gpu.mig_mode import mig_devices
from checks.gpu.readers import SnapshotError, opt_int, opt_str, text
from checks.policy import ResolvedPolicy

GEOMETRY_UNMET = "mig-geometry-unmet"
MIG_DISABLED = "mig-geometry-mig-disabled"
FIX = ("Create the stated GPU instances (`nvidia-smi mig -i N -dci; nvidia-smi mig -i N -dgi; "
       "nvidia-smi mig -i N -cgi <profiles> -C`, or the GPU Operator's MIG manager: label the "
       "node nvidia.com/mig.config with a mig-parted config of this geometry), or correct "
       "gpu.mig_geometry in the config.")
DISABLED_FIX = ("Enable MIG on the GPU (`nvidia-smi -i N -mig 1`, then reset it) and create the "
                "stated instances, or remove the GPU from gpu.mig_geometry.")
SOURCE = ("NVIDIA Multi-Instance GPU User Guide (\"Supported MIG Profiles\": profile names; "
          "\"Getting Started with MIG\": nvidia-smi mig -lgi); nvml.h nvmlGpuInstanceGetInfo")


def stated(geometry: Mapping[str, Any], gpu: Mapping[str, Any]) -> Optional[Tuple[str, List[str]]]:
    """(what matched, profiles) for one GPU: its index key, else its product name's key."""
    by_index = geometry.get(str(gpu.get("index")))
    if isinstance(by_index, list):
        return f"gpu.mig_geometry[{gpu.get('index')}]", by_index
    name = gpu.get("name")
    by_name = geometry.get(name) if isinstance(name, str) else None
    if isinstance(by_name, list):
        return f"gpu.mig_geometry[{name!r}]", by_name
    return None


def geometry_of(devices: List[Mapping[str, Any]], where: str) -> List[str]:
    """One profile per GPU instance (distinct gpu_instance_id); an unnamed profile is '?'."""
    seen: Dict[Any, str] = {}
    for i, dev in enumerate(devices):
        at = f"{where}.devices[{i}]"
        gi = opt_int(dev, "gpu_instance_id", at)
        profile = opt_str(dev, "profile", at)
        seen.setdefault(gi if gi is not None else ("device", i), profile or "?")
    return sorted(seen.values())


def describe(profiles: List[str]) -> str:
    if not profiles:
        return "no GPU instance"
    counts = Counter(profiles)
    return ", ".join(f"{n} x {text(p, 40)}" for p, n in sorted(counts.items()))


def _judge(host: HostView, policy: ResolvedPolicy, snap: GpuSnapshot) -> Outcome:
    geometry = setting(policy, "gpu", "mig_geometry", {}) or {}
    f = Findings()
    judged: Dict[int, Any] = {}
    records = {g.get("index"): g for g in snap.get("gpus") or []}
    for gpu, mig in each_field(snap, "mig", f):
        label, want = gpu_label(gpu), stated(geometry, gpu)
        if want is None:
            continue
        key, profiles = want
        entry: Dict[str, Any] = {"stated_by": key, "want": sorted(profiles)}
        judged[gpu["index"]] = entry
        try:
            current = opt_str(mig, "current", f.where)
            devices = mig_devices(mig, f.where) if current == "enabled" else None
            have = geometry_of(devices, f.where) if devices is not None else None
        except SnapshotError as exc:
            f.malformed(exc)
            continue
        if current != "enabled":
            f.fail(MIG_DISABLED, f"{label} has MIG {text(current or 'unknown')}; {key} states "
                                 f"{describe(profiles)}")
            continue
        if have is None:
            err: Any = (gpu.get("errors") or {}).get("mig.devices") or {}
            err = err if isinstance(err, Mapping) else {}
            message = err.get("message")
            f.unreadable.append((FIELD_UNREADABLE,
                                 f"{label} mig.devices: {text(err.get('kind', 'missing'))}"
                                 + (f" ({text(message, 200)})" if message else "")))
            continue
        entry["have"] = have
        if Counter(have) != Counter(profiles):
            f.fail(GEOMETRY_UNMET, f"{label} MIG geometry is {describe(have)}; {key} wants "
                                   f"{describe(profiles)}")
    for index in f.unsupported:
        want = stated(geometry, records.get(index) or {"index": index})
        if want is not None:
            judged[index] = {"stated_by": want[0], "want": sorted(want[1])}
            f.fail(MIG_DISABLED, f"GPU {index} cannot run MIG (NVML: not supported); {want[0]} "
                                 f"states {describe(want[1])}")
    missing = sorted(k for k in geometry if k.isdigit() and int(k) not in records)
    for key in missing:
        f.fail(GEOMETRY_UNMET, f"gpu.mig_geometry[{key}]: NVML reports no GPU {key} "
                               f"({len(records)} GPU(s))")
    f.per_gpu = judged
    if not judged and not f.failures and not f.unreadable:
        return not_applicable("no GPU on this host is named in gpu.mig_geometry (by index or "
                              "product name)", stated=sorted(geometry))
    f.checked = len(judged)
    f.unsupported = []  # judged above: a GPU without MIG is a failure only when it is stated
    return f.outcome("MIG geometry as stated on {n} GPU(s)", "MIG geometry")


def _mig_geometry(host: HostView, policy: ResolvedPolicy) -> Outcome:
    if not setting(policy, "gpu", "mig_geometry", {}):
        return not_applicable("no MIG geometry stated (gpu.mig_geometry)")
    return _checked(host, policy)


_checked = gpu_check(_judge)

MIG_GEOMETRY = Check(
    id="mig-geometry",
    title="MIG geometry NVML reports matches gpu.mig_geometry (GPU instance profiles per GPU)",
    severity=Severity.CRITICAL,
    gates=ALL_PATHS,
    interval=Interval.SLOW,
    remediation="Create the stated MIG instances, or correct gpu.mig_geometry.",
    run=_mig_geometry,
    uses_gpus=True,
    requires=NVML_REQUIRES,
    since_policy=2,
    failures=(
        Failure(GEOMETRY_UNMET, Status.FAIL,
                "a GPU's GPU instance profiles differ from the ones gpu.mig_geometry states "
                "(or it names an index NVML does not report)", FIX, SOURCE),
        Failure(MIG_DISABLED, Status.FAIL,
                "a GPU gpu.mig_geometry names has MIG disabled or cannot run MIG",
                DISABLED_FIX, "nvml.h nvmlDeviceGetMigMode"),
    ) + snapshot_failures(),
)
