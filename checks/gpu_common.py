"""What the GPU checks share: reading the snapshot (docs/gpu-snapshot.md) and turning
per-GPU findings into one Outcome.

Ownership (DESIGN.md): nvml-responsive owns NVML-level errors and gpu-count owns lost
GPUs, so the per-GPU checks leave lost GPUs out (naming them) instead of failing again.
A field NVML answered "not supported" for is not a fault (an H100 PCIe has no NVLink).
"""
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

from checks.base import Outcome, failed, passed, skipped, unknown, warned

NVML_REQUIRES = ("nvml-responsive",)


def gpus_of(host: Any) -> Tuple[Optional[Mapping[str, Any]], Optional[Outcome]]:
    """The snapshot, or the outcome to return when there is no usable one. (With
    requires=nvml-responsive the engine already skips these checks on an NVML error;
    this guards direct calls and hand-edited bundles.)"""
    snap = host.gpus()
    if snap is None:
        return None, unknown("GPU snapshot not captured for this host (no gpus.json)")
    if snap.get("error"):
        kind = snap["error"].get("kind", "error")
        return None, skipped(f"needs nvml-responsive (NVML error: {kind})",
                             kind="needs:nvml-responsive")
    return snap, None


def gpu_label(gpu: Mapping[str, Any]) -> str:
    bus = gpu.get("pci_bus_id")
    return f"GPU {gpu.get('index')}" + (f" ({bus})" if bus else "")


@dataclass
class Findings:
    """Per-GPU results, folded into one Outcome by ``outcome``."""

    failures: List[str] = field(default_factory=list)
    warnings: List[str] = field(default_factory=list)
    unreadable: List[str] = field(default_factory=list)
    unsupported: List[int] = field(default_factory=list)
    lost: List[int] = field(default_factory=list)
    checked: int = 0
    per_gpu: Dict[int, Any] = field(default_factory=dict)

    def outcome(self, ok_summary: str, what: str, remediation: Optional[str] = None,
                warn_remediation: Optional[str] = None, **details: Any) -> Outcome:
        details = dict(details, per_gpu=self.per_gpu, lost_gpus=self.lost,
                       unsupported_gpus=self.unsupported)
        tail = ""
        if self.lost:
            tail = f"; GPU {', '.join(map(str, self.lost))} lost (see gpu-count)"
        if self.failures:
            return failed("; ".join(self.failures) + tail, remediation, **details)
        if self.unreadable:
            return unknown(f"cannot read {what}: " + "; ".join(self.unreadable) + tail, **details)
        if self.warnings:
            return warned("; ".join(self.warnings) + tail, warn_remediation, **details)
        if self.checked == 0:
            if self.unsupported:
                return skipped(f"{what} not supported on any GPU", **details)
            return skipped(f"no readable GPU to check {what} on" + tail,
                           kind="input-missing", **details)
        note = f" ({len(self.unsupported)} GPU(s) without {what})" if self.unsupported else ""
        return passed(ok_summary.format(n=self.checked) + note + tail, **details)


def each_field(
    snap: Mapping[str, Any], name: str, findings: Findings
) -> Iterator[Tuple[Mapping[str, Any], Any]]:
    """Yield (gpu, value) for every GPU whose ``name`` field NVML answered; record lost,
    unsupported and unreadable GPUs in ``findings`` as it goes."""
    for gpu in snap.get("gpus") or []:
        index = gpu.get("index")
        if gpu.get("error"):
            findings.lost.append(index)
            continue
        value = gpu.get(name)
        if value is None:
            err = (gpu.get("errors") or {}).get(name) or {}
            if err.get("kind") == "not_supported":
                findings.unsupported.append(index)
            else:
                findings.unreadable.append(
                    f"{gpu_label(gpu)} {name}: {err.get('kind', 'missing')}"
                    + (f" ({err['message']})" if err.get("message") else ""))
            continue
        findings.checked += 1
        yield gpu, value


def setting(policy: Any, section: str, name: str, default: Any) -> Any:
    """A config value (policy.settings is config.model_dump()); default when absent."""
    sect = policy.setting(section) if hasattr(policy, "setting") else None
    if isinstance(sect, Mapping) and name in sect:
        return sect[name]
    return default


def gpu_policy(policy: Any) -> Any:
    """The `gpu` policy section (checks/gpu_policy.py), defaults when the Policy lacks it."""
    from checks.gpu_policy import GpuPolicy

    found = getattr(getattr(policy, "policy", None), "gpu", None)
    return found if found is not None else GpuPolicy()
