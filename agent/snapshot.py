"""The GPU snapshot (`gpus.json`, schema version 1) as typed records: docs/gpu-snapshot.md is
the contract, these TypedDicts say it to the type checker (tests/unit/test_gpu_snapshot_doc.py
holds their keys against the page's field tables, so the two cannot drift).

The NVML worker (agent/nvml/) builds plain dicts of this shape; `HostView.gpus()` hands them
to the checks as a :class:`GpuSnapshot`. A bundle's gpus.json is input, so a value may still
have any JSON type at run time: the checks read every field through checks/gpu/common.py's
validating readers, never trusting these annotations for input.

Python 3.9: typing.TypedDict has no ``NotRequired``; a record whose keys are partly optional
is a required base plus a ``total=False`` subclass. A per-GPU field an NVML call failed for
is ``null`` (the docs' "a single call that failed sets that field to null"), hence Optional.
"""
from typing import Any, Dict, List, Optional, TypedDict


class NvmlError(TypedDict):
    """The one error shape, at any level ("## Errors")."""

    kind: str
    message: Optional[str]
    nvml_code: Optional[int]


class WorkerInfo(TypedDict):
    """The worker that answered and the request's round trip (live only)."""

    pid: Optional[int]
    wall_s: Optional[float]


class MemoryRecord(TypedDict):
    total_bytes: int
    used_bytes: int


class TemperatureRecord(TypedDict):
    gpu_c: int
    slowdown_c: int
    shutdown_c: int


class EccCounters(TypedDict):
    corrected: int
    uncorrected: int


class EccRecord(TypedDict):
    mode_current: bool
    mode_pending: bool
    volatile: EccCounters
    aggregate: EccCounters


class RemappedRowsRecord(TypedDict):
    correctable: int
    uncorrectable: int
    pending: bool
    failure: bool


class ClockEventReasons(TypedDict):
    mask: int
    active: List[str]


class PcieRecord(TypedDict):
    gen_current: int
    gen_max: int
    width_current: int
    width_max: int


class NvLinkState(TypedDict):
    link: int
    active: bool


class NvLinkRecord(TypedDict):
    supported: bool
    links: List[NvLinkState]


class MigDevice(TypedDict):
    """One MIG device (a compute instance) under a MIG-enabled GPU."""

    uuid: str
    profile: Optional[str]
    gpu_instance_id: int
    compute_instance_id: int


class _MigRequired(TypedDict):
    current: str
    pending: str


class MigRecord(_MigRequired, total=False):
    """`devices` is absent when not read (MIG off, an older snapshot, or the read failed:
    errors["mig.devices"]); [] is MIG on with no instance."""

    devices: List[MigDevice]


class PowerLimitRecord(TypedDict):
    limit_mw: int
    enforced_mw: int


class ApplicationsClocksRecord(TypedDict):
    graphics_mhz: int
    memory_mhz: int


class FabricRecord(TypedDict):
    state: str
    status: str
    status_code: Optional[int]
    clique_id: Optional[int]


class _GpuRequired(TypedDict):
    index: int


class GpuRecord(_GpuRequired, total=False):
    """One NVML index ("## Per GPU"). A lost GPU has `index` and `error` only."""

    error: NvmlError
    errors: Dict[str, NvmlError]
    uuid: Optional[str]
    name: Optional[str]
    pci_bus_id: Optional[str]
    pci_device_id: Optional[int]
    board_part_number: Optional[str]
    vbios_version: Optional[str]
    inforom_image_version: Optional[str]
    memory: Optional[MemoryRecord]
    temperature: Optional[TemperatureRecord]
    ecc: Optional[EccRecord]
    remapped_rows: Optional[RemappedRowsRecord]
    clock_event_reasons: Optional[ClockEventReasons]
    pcie: Optional[PcieRecord]
    nvlink: Optional[NvLinkRecord]
    mig: Optional[MigRecord]
    fabric: Optional[FabricRecord]
    persistence_mode: Optional[bool]
    power_limit: Optional[PowerLimitRecord]
    applications_clocks: Optional[ApplicationsClocksRecord]


class _SnapshotRequired(TypedDict):
    schema_version: int
    source: str
    captured_at: str
    error: Optional[NvmlError]
    gpus: List[GpuRecord]


class GpuSnapshot(_SnapshotRequired, total=False):
    """The whole snapshot ("## Top level"). When `error` is set, `gpus` is [] and the keys
    below may be absent."""

    driver_version: Optional[str]
    nvml_version: Optional[str]
    cuda_driver_version: Optional[int]
    errors: Dict[str, NvmlError]
    device_count: int
    duration_s: float
    worker: WorkerInfo


__all__ = [
    "ApplicationsClocksRecord", "ClockEventReasons", "EccCounters", "EccRecord", "FabricRecord",
    "GpuRecord", "GpuSnapshot", "MemoryRecord", "MigDevice", "MigRecord", "NvLinkRecord",
    "NvLinkState", "NvmlError", "PcieRecord", "PowerLimitRecord", "RemappedRowsRecord",
    "TemperatureRecord", "WorkerInfo",
]


def pci_key(bus_id: Any) -> Optional[str]:
    """A GPU's PCI address as one key, 4-digit domain:bus:device in lowercase, whichever way
    it was written: NVML's "00000000:9B:00.0", udev's "0000:9b:00.0", the kernel log's
    "PCI:0000:9b:00" (the XID line's device). None for anything else: a snapshot and a kernel
    log are input, and a pci_bus_id may be any JSON value."""
    if not isinstance(bus_id, str):
        return None
    text = bus_id.strip().lower()
    if text.startswith("pci:"):
        text = text[4:]
    parts = text.split(".")[0].split(":")
    if len(parts) != 3 or not all(parts):
        return None
    return f"{parts[0][-4:].rjust(4, '0')}:{parts[1]}:{parts[2]}"
