"""What the GPU checks share: reading the snapshot (docs/gpu-snapshot.md) and turning
per-GPU findings into one Outcome.

Ownership (docs/architecture.md): nvml-responsive owns NVML-level errors and gpu-count owns lost
GPUs, so the per-GPU checks leave lost GPUs out (naming them) instead of failing again.
A field NVML answered "not supported" for is not a fault (an H100 PCIe has no NVLink).

The snapshot is input: a bundle's gpus.json may hold any JSON value in any field. Every
value a check reads goes through the readers below, which raise :class:`SnapshotError`
(naming the field) for a value of the wrong type; the checks turn it into `unknown`.
"""
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

from agent.errors import ParseError
from checks.base import Outcome, failed, passed, skipped, unknown, warned

NVML_REQUIRES = ("nvml-responsive",)
# NVML indices, counts and counters are C unsigned ints (nvml.h); anything past 2**64 is not
# from NVML, and str() of an integer past 4,300 digits raises on Python >= 3.11.
INT_LIMIT = 2**64


class SnapshotError(ParseError):
    """A snapshot field whose value does not have its documented type; ``field`` names it
    the way docs/gpu-snapshot.md does (``gpus[2].ecc.volatile.uncorrected``)."""

    def __init__(self, field: str, expected: str, value: Any) -> None:
        super().__init__(f"field {field} is {kind_of(value)}, expected {expected}")
        self.field = field


def kind_of(value: Any) -> str:
    """A JSON value's type in words (never the value: it may be huge or a secret)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer" if -INT_LIMIT <= value <= INT_LIMIT else "an integer out of range"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    return f"a {type(value).__name__}"


def text(value: Any, limit: int = 80) -> str:
    """A snapshot string made safe for a summary: bounded, and encodable as UTF-8 (JSON can
    carry a lone surrogate such as "\\ud800", which no stream can print). Non-strings are
    described by type."""
    if not isinstance(value, str):
        return f"<{kind_of(value)}>"
    return value[:limit].encode("utf-8", "replace").decode("utf-8")


# -- typed readers: each returns the value or raises SnapshotError naming the field ------
def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def sub(obj: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    """A nested object; null/absent = empty."""
    value = obj.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SnapshotError(_join(where, key), "an object", value)
    return value


def opt_int(obj: Mapping[str, Any], key: str, where: str) -> Optional[int]:
    """An integer (not a boolean) within NVML's range; null/absent = None."""
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or abs(value) > INT_LIMIT:
        raise SnapshotError(_join(where, key), "an integer", value)
    return value


def count(obj: Mapping[str, Any], key: str, where: str) -> int:
    """A counter; null/absent = 0 (as the checks always read it)."""
    value = opt_int(obj, key, where)
    return 0 if value is None else value


def flag(obj: Mapping[str, Any], key: str, where: str) -> Optional[bool]:
    value = obj.get(key)
    if value is None or isinstance(value, bool):
        return value
    raise SnapshotError(_join(where, key), "a boolean", value)


def opt_str(obj: Mapping[str, Any], key: str, where: str) -> Optional[str]:
    value = obj.get(key)
    if value is None or isinstance(value, str):
        return value
    raise SnapshotError(_join(where, key), "a string", value)


def str_list(obj: Mapping[str, Any], key: str, where: str) -> List[str]:
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SnapshotError(_join(where, key), "a list of strings", value)
    return value


def _validate(snap: Any) -> None:
    """The structure every GPU check relies on: a list of GPU objects, each with an integer
    index, an optional error object, an optional errors object and a string PCI id."""
    gpus = snap.get("gpus")
    if gpus is None:
        return
    if not isinstance(gpus, list):
        raise SnapshotError("gpus", "a list", gpus)
    for i, gpu in enumerate(gpus):
        where = f"gpus[{i}]"
        if not isinstance(gpu, Mapping):
            raise SnapshotError(where, "an object", gpu)
        index = gpu.get("index")
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index <= INT_LIMIT:
            raise SnapshotError(f"{where}.index", "a non-negative integer", index)
        sub(gpu, "error", where)
        sub(gpu, "errors", where)
        opt_str(gpu, "pci_bus_id", where)


def snapshot_problem(snap: Any) -> Optional[SnapshotError]:
    """The first structural problem of a snapshot, or None: an object whose ``error`` is an
    object or null (when set, nothing else matters: docs/gpu-snapshot.md), whose GPUs pass
    ``_validate``, whose ``device_count`` is an integer and ``worker.wall_s`` a number."""
    try:
        if not isinstance(snap, Mapping):
            raise SnapshotError("(the whole file)", "an object", snap)
        error = sub(snap, "error", "")
        if error:
            opt_str(error, "kind", "error")
            opt_str(error, "message", "error")
            return None
        _validate(snap)
        opt_int(snap, "device_count", "")
        wall = sub(snap, "worker", "").get("wall_s")
        if wall is not None and (isinstance(wall, bool) or not isinstance(wall, (int, float))
                                 or not abs(wall) < INT_LIMIT):
            raise SnapshotError("worker.wall_s", "a number", wall)
    except SnapshotError as exc:
        return exc
    return None


def gpus_of(host: Any) -> Tuple[Optional[Mapping[str, Any]], Optional[Outcome]]:
    """The snapshot, or the outcome to return when there is no usable one. (With
    requires=nvml-responsive the engine already skips these checks on an NVML error;
    this guards direct calls and hand-edited bundles.)"""
    snap = host.gpus()
    if snap is None:
        return None, unknown("GPU snapshot not captured for this host (no gpus.json)")
    problem = snapshot_problem(snap)
    if problem is not None:
        return None, malformed(problem)
    if snap.get("error"):
        kind = snap["error"].get("kind") or "error"
        return None, skipped(f"needs nvml-responsive (NVML error: {text(kind)})")
    return snap, None


def malformed(exc: SnapshotError) -> Outcome:
    return unknown(f"GPU snapshot malformed: {exc}", field=exc.field)


def gpu_label(gpu: Mapping[str, Any]) -> str:
    bus = gpu.get("pci_bus_id")
    return f"GPU {gpu.get('index')}" + (f" ({text(bus)})" if bus else "")


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
    # The GPU and field each_field yielded last, as gpus.json names them ("gpus[2]",
    # "gpus[2].ecc"), for SnapshotError messages.
    gpu_where: str = ""
    where: str = ""

    def malformed(self, exc: SnapshotError) -> None:
        """A GPU whose field has the wrong shape: not checked, the check is unknown."""
        self.checked -= 1
        self.unreadable.append(f"malformed snapshot: {exc}")

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
            return skipped(f"no readable GPU to check {what} on" + tail, **details)
        note = f" ({len(self.unsupported)} GPU(s) without {what})" if self.unsupported else ""
        return passed(ok_summary.format(n=self.checked) + note + tail, **details)


def each_field(
    snap: Mapping[str, Any], name: str, findings: Findings, expected: type = Mapping
) -> Iterator[Tuple[Mapping[str, Any], Any]]:
    """Yield (gpu, value) for every GPU whose ``name`` field NVML answered; record lost,
    unsupported, unreadable and malformed GPUs in ``findings`` as it goes. ``snap`` has
    passed ``gpus_of``; ``expected`` is the field's type (an object unless said)."""
    for i, gpu in enumerate(snap.get("gpus") or []):
        index = gpu["index"]
        if gpu.get("error"):
            findings.lost.append(index)
            continue
        value = gpu.get(name)
        if value is None:
            err = (gpu.get("errors") or {}).get(name)
            err = err if isinstance(err, Mapping) else {}
            if err.get("kind") == "not_supported":
                findings.unsupported.append(index)
            else:
                message = err.get("message")
                findings.unreadable.append(
                    f"{gpu_label(gpu)} {name}: {text(err.get('kind', 'missing'))}"
                    + (f" ({text(message, 200)})" if message else ""))
            continue
        if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
            what = "a boolean" if expected is bool else "an object"
            findings.unreadable.append(
                f"malformed snapshot: {SnapshotError(f'gpus[{i}].{name}', what, value)}")
            continue
        findings.checked += 1
        findings.gpu_where = f"gpus[{i}]"
        findings.where = f"gpus[{i}].{name}"
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
