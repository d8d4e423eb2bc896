"""What one GPU snapshot reads from NVML, per GPU, and the nvml.h tables that decode it.

Loaded only inside the NVML worker process (``python -m agent.nvml.worker``), like pynvml
itself: the agent's own process never imports either (docs/architecture.md), so a wedged
driver can only ever block a process the client can kill. Each reader returns plain data for
docs/gpu-snapshot.md; a reader that fails leaves its field None and an ``errors`` entry.
"""
import ctypes
from typing import Any, Callable, Dict, List, Optional, Tuple

import pynvml

# nvmlReturn_t codes (nvml.h) -> the snapshot's error kinds (docs/gpu-snapshot.md).
ERROR_KINDS: Dict[int, str] = {
    pynvml.NVML_ERROR_UNINITIALIZED: "uninitialized",
    pynvml.NVML_ERROR_NOT_SUPPORTED: "not_supported",
    pynvml.NVML_ERROR_NO_PERMISSION: "no_permission",
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED: "driver_not_loaded",
    pynvml.NVML_ERROR_TIMEOUT: "timeout",
    pynvml.NVML_ERROR_LIBRARY_NOT_FOUND: "library_not_found",
    pynvml.NVML_ERROR_FUNCTION_NOT_FOUND: "function_not_found",
    pynvml.NVML_ERROR_CORRUPTED_INFOROM: "corrupted_inforom",
    pynvml.NVML_ERROR_GPU_IS_LOST: "gpu_lost",
    pynvml.NVML_ERROR_RESET_REQUIRED: "reset_required",
    pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH: "driver_library_mismatch",
    pynvml.NVML_ERROR_INSUFFICIENT_POWER: "insufficient_power",
    pynvml.NVML_ERROR_IRQ_ISSUE: "irq_issue",
}

# nvmlClocksEventReason* bits (nvml.h "Clocks Event Reasons"), in bit order.
CLOCK_EVENT_BITS: Tuple[Tuple[int, str], ...] = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)
FABRIC_STATES = {0: "not_supported", 1: "not_started", 2: "in_progress", 3: "completed"}
NVLINK_MAX_LINKS = int(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18))


def decode_clock_events(mask: int) -> List[str]:
    names = [name for bit, name in CLOCK_EVENT_BITS if mask & bit]
    unknown_bits = mask & ~sum(bit for bit, _ in CLOCK_EVENT_BITS)
    if unknown_bits:
        names.append(f"unknown_0x{unknown_bits:x}")
    return names


def error_record(exc: BaseException) -> Dict[str, Any]:
    """An NVML failure as plain data: kind, message, nvml_code."""
    if isinstance(exc, pynvml.NVMLError):
        code = int(getattr(exc, "value", -1))
        try:
            message = str(exc)
        except Exception:  # nvmlErrorString itself needs the library
            message = f"NVML error {code}"
        return {"kind": ERROR_KINDS.get(code, "nvml_error"), "message": message, "nvml_code": code}
    return {"kind": "worker_error", "message": f"{type(exc).__name__}: {exc}", "nvml_code": None}


def as_text(value: Any) -> str:
    """An NVML string: some nvidia-ml-py releases return bytes, others str."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _clock_event_reasons(handle: Any) -> Dict[str, Any]:
    # Renamed from "throttle reasons" in R535 (nvml.h); older nvidia-ml-py only has the old name.
    fn = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
    fn = fn or pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
    mask = int(fn(handle))
    return {"mask": mask, "active": decode_clock_events(mask)}


def _ecc(handle: Any) -> Dict[str, Any]:
    current, pending = pynvml.nvmlDeviceGetEccMode(handle)
    out: Dict[str, Any] = {"mode_current": bool(current), "mode_pending": bool(pending)}
    counters = ((pynvml.NVML_VOLATILE_ECC, "volatile"), (pynvml.NVML_AGGREGATE_ECC, "aggregate"))
    for counter, name in counters:
        out[name] = {
            "corrected": int(pynvml.nvmlDeviceGetTotalEccErrors(
                handle, pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, counter)),
            "uncorrected": int(pynvml.nvmlDeviceGetTotalEccErrors(
                handle, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, counter)),
        }
    return out


def _temperature(handle: Any) -> Dict[str, Any]:
    now = pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)
    out: Dict[str, Any] = {"gpu_c": int(now)}
    for key, which in (
        ("slowdown_c", pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN),
        ("shutdown_c", pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN),
    ):
        out[key] = int(pynvml.nvmlDeviceGetTemperatureThreshold(handle, which))
    return out


def _remapped_rows(handle: Any) -> Dict[str, Any]:
    corr, unc, pending, failure = pynvml.nvmlDeviceGetRemappedRows(handle)
    return {"correctable": int(corr), "uncorrectable": int(unc),
            "pending": bool(pending), "failure": bool(failure)}


def _pcie(handle: Any) -> Dict[str, Any]:
    return {
        "gen_current": int(pynvml.nvmlDeviceGetCurrPcieLinkGeneration(handle)),
        "gen_max": int(pynvml.nvmlDeviceGetMaxPcieLinkGeneration(handle)),
        "width_current": int(pynvml.nvmlDeviceGetCurrPcieLinkWidth(handle)),
        "width_max": int(pynvml.nvmlDeviceGetMaxPcieLinkWidth(handle)),
    }


def _nvlink(handle: Any) -> Dict[str, Any]:
    """State of every NVLink the GPU has. Link 0 NOT_SUPPORTED = a GPU without NVLink; past
    the last link the driver answers INVALID_ARGUMENT or NOT_SUPPORTED (nvml.h)."""
    links: List[Dict[str, Any]] = []
    for link in range(NVLINK_MAX_LINKS):
        try:
            state = pynvml.nvmlDeviceGetNvLinkState(handle, link)
        except pynvml.NVMLError as exc:
            if exc.value in (pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_INVALID_ARGUMENT):
                if link == 0:
                    return {"supported": False, "links": []}
                break
            raise
        links.append({"link": link, "active": state == pynvml.NVML_FEATURE_ENABLED})
    return {"supported": True, "links": links}


def _mig(handle: Any) -> Dict[str, Any]:
    current, pending = pynvml.nvmlDeviceGetMigMode(handle)
    names = {pynvml.NVML_DEVICE_MIG_ENABLE: "enabled", pynvml.NVML_DEVICE_MIG_DISABLE: "disabled"}
    return {"current": names.get(current, str(current)),
            "pending": names.get(pending, str(pending))}


# nvmlGpuInstanceProfileInfo_v2_t.name is the profile as `nvidia-smi mig -lgip` prints it
# ("MIG 1g.10gb"); the snapshot drops "MIG " so the name reads as the device plugin's
# resource suffix (nvidia.com/mig-1g.10gb) and the GPU Operator's mig-parted configs write it.
MIG_NAME_PREFIX = "MIG "
# nvml.h NVML_GPU_INSTANCE_PROFILE_COUNT (0x12 in CUDA 13's header); old nvidia-ml-py lacks it.
GPU_INSTANCE_PROFILES = int(getattr(pynvml, "NVML_GPU_INSTANCE_PROFILE_COUNT", 0x12))
# A GPU has at most 7 (A100/H100) or 8 MIG slices; the bound only guards a broken driver answer.
MAX_MIG_DEVICES = 64


def _mig_profile_names(handle: Any) -> Dict[int, str]:
    """GPU instance profile id -> name. Every NVML_GPU_INSTANCE_PROFILE_* index is asked, as
    NVIDIA/go-nvlib pkg/nvlib/device/mig_device.go (GetProfile) does: an index this GPU does not
    offer answers NOT_SUPPORTED or INVALID_ARGUMENT (nvml.h nvmlDeviceGetGpuInstanceProfileInfoV),
    and the instance's profileId is matched against the info's id, not the index."""
    names: Dict[int, str] = {}
    for index in range(GPU_INSTANCE_PROFILES):
        try:  # version=2 (the default) calls nvmlDeviceGetGpuInstanceProfileInfoV
            info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, index)
        except pynvml.NVMLError as exc:
            if exc.value in (pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_INVALID_ARGUMENT):
                continue
            raise
        name = as_text(info.name)
        if name.startswith(MIG_NAME_PREFIX):
            name = name[len(MIG_NAME_PREFIX):]
        names[int(info.id)] = name
    return names


def _mig_devices(handle: Any) -> List[Dict[str, Any]]:
    """The MIG devices (one per compute instance) NVML reports under a MIG-enabled GPU:
    nvmlDeviceGetMaxMigDeviceCount slots, each nvmlDeviceGetMigDeviceHandleByIndex
    (NOT_FOUND = an empty slot, nvml.h); the GPU instance's profile from
    nvmlDeviceGetGpuInstanceById + nvmlGpuInstanceGetInfo (profileId)."""
    devices: List[Dict[str, Any]] = []
    names: Optional[Dict[int, str]] = None
    slots = min(int(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)), MAX_MIG_DEVICES)
    for slot in range(slots):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except pynvml.NVMLError as exc:
            if exc.value == pynvml.NVML_ERROR_NOT_FOUND:
                continue
            raise
        gi_id = int(pynvml.nvmlDeviceGetGpuInstanceId(mig))
        ci_id = int(pynvml.nvmlDeviceGetComputeInstanceId(mig))
        info = pynvml.nvmlGpuInstanceGetInfo(pynvml.nvmlDeviceGetGpuInstanceById(handle, gi_id))
        if names is None:
            names = _mig_profile_names(handle)
        devices.append({"uuid": as_text(pynvml.nvmlDeviceGetUUID(mig)),
                        "profile": names.get(int(info.profileId)),
                        "gpu_instance_id": gi_id, "compute_instance_id": ci_id})
    return devices


def _fabric(handle: Any) -> Dict[str, Any]:
    info = pynvml.c_nvmlGpuFabricInfo_t()
    pynvml.nvmlDeviceGetGpuFabricInfo(handle, ctypes.byref(info))
    status = int(info.status)
    return {
        "state": FABRIC_STATES.get(int(info.state), str(int(info.state))),
        "status": ("success" if status == pynvml.NVML_SUCCESS
                   else ERROR_KINDS.get(status, "nvml_error")),
        "status_code": status,
        "clique_id": int(info.cliqueId),
    }


def _memory(handle: Any) -> Dict[str, Any]:
    mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
    return {"total_bytes": int(mem.total), "used_bytes": int(mem.used)}


def _power_limit(handle: Any) -> Dict[str, Any]:
    """Milliwatts (nvml.h): the limit set (`nvidia-smi -q` "Requested Power Limit") and the one
    the driver enforces after every other limiter ("Current Power Limit")."""
    return {"limit_mw": int(pynvml.nvmlDeviceGetPowerManagementLimit(handle)),
            "enforced_mw": int(pynvml.nvmlDeviceGetEnforcedPowerLimit(handle))}


def _applications_clocks(handle: Any) -> Dict[str, Any]:
    # Deprecated in CUDA 13's nvml.h (removal announced for 14.0): a driver that drops it
    # answers an error, recorded in errors["applications_clocks"] like any other.
    clock = pynvml.nvmlDeviceGetApplicationsClock
    return {"graphics_mhz": int(clock(handle, pynvml.NVML_CLOCK_GRAPHICS)),
            "memory_mhz": int(clock(handle, pynvml.NVML_CLOCK_MEM))}


# Field name -> reader. A failing reader sets the field to None and records errors[field].
FIELDS: Tuple[Tuple[str, Callable[[Any], Any]], ...] = (
    ("uuid", lambda h: as_text(pynvml.nvmlDeviceGetUUID(h))),
    ("name", lambda h: as_text(pynvml.nvmlDeviceGetName(h))),
    ("pci_bus_id", lambda h: as_text(pynvml.nvmlDeviceGetPciInfo(h).busId)),
    # nvmlPciInfo_t.pciDeviceId: device id in the upper 16 bits, vendor (0x10DE) in the lower.
    ("pci_device_id", lambda h: int(pynvml.nvmlDeviceGetPciInfo(h).pciDeviceId)),
    ("board_part_number", lambda h: as_text(pynvml.nvmlDeviceGetBoardPartNumber(h))),
    ("vbios_version", lambda h: as_text(pynvml.nvmlDeviceGetVbiosVersion(h))),
    ("inforom_image_version", lambda h: as_text(pynvml.nvmlDeviceGetInforomImageVersion(h))),
    ("memory", _memory),
    ("temperature", _temperature),
    ("ecc", _ecc),
    ("remapped_rows", _remapped_rows),
    ("clock_event_reasons", _clock_event_reasons),
    ("pcie", _pcie),
    ("nvlink", _nvlink),
    ("mig", _mig),
    ("fabric", _fabric),
    ("persistence_mode",
     lambda h: pynvml.nvmlDeviceGetPersistenceMode(h) == pynvml.NVML_FEATURE_ENABLED),
    ("power_limit", _power_limit),
    ("applications_clocks", _applications_clocks),
)


def read_gpu(index: int) -> Dict[str, Any]:
    gpu: Dict[str, Any] = {"index": index}
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    except pynvml.NVMLError as exc:
        gpu["error"] = error_record(exc)
        return gpu
    errors: Dict[str, Any] = {}
    for name, reader in FIELDS:
        try:
            gpu[name] = reader(handle)
        except pynvml.NVMLError as exc:
            gpu[name] = None
            errors[name] = error_record(exc)
    mig = gpu.get("mig")
    if isinstance(mig, dict) and mig.get("current") == "enabled":
        # Absent = not read (MIG off, or the read failed: errors["mig.devices"]); [] = MIG on
        # with no instance (docs/gpu-snapshot.md).
        try:
            mig["devices"] = _mig_devices(handle)
        except pynvml.NVMLError as exc:
            errors["mig.devices"] = error_record(exc)
    lost = [e for e in errors.values() if e["kind"] == "gpu_lost"]
    if lost:  # the whole GPU is gone, not one counter: say so once, at GPU level
        gpu["error"] = lost[0]
    gpu["errors"] = errors
    return gpu
