"""NVML constants the agent depends on, checked against nvml.h as NVIDIA ships it in the
nvidia-nvml-dev wheel (a test dependency), parsed here, never against our own tables.

A swapped clock-event bit (hardware thermal slowdown decoded as sync boost) fails
``test_clock_event_bit_matches_nvml_h[hw_thermal_slowdown]`` and the behaviour test below,
which builds its snapshot from the header's bit, not from agent.nvml.readers.CLOCK_EVENT_BITS.
"""
import re
from typing import Dict

import pynvml
import pytest

from agent.host.seam import Host, StaticGpus
from agent.model import Status
from agent.nvml import readers as nvml_readers
from checks.gpu.gpu_thermal import GPU_THERMAL
from checks.policy import ResolvedPolicy, load_policy
from tests.nvml_sim import simlib

# Our snapshot's reason names (docs/gpu-snapshot.md) -> the nvml.h macro suffix
# (nvmlClocksEventReason<Suffix>, or the older nvmlClocksThrottleReason<Suffix>).
REASON_MACROS: Dict[str, str] = {
    "gpu_idle": "GpuIdle",
    "applications_clocks_setting": "ApplicationsClocksSetting",
    "sw_power_cap": "SwPowerCap",
    "hw_slowdown": "HwSlowdown",
    "sync_boost": "SyncBoost",
    "sw_thermal_slowdown": "SwThermalSlowdown",
    "hw_thermal_slowdown": "HwThermalSlowdown",
    "hw_power_brake_slowdown": "HwPowerBrakeSlowdown",
    "display_clock_setting": "DisplayClockSetting",
}
# Our error kinds (docs/gpu-snapshot.md) -> nvmlReturn_t member.
ERROR_MEMBERS: Dict[str, str] = {
    "uninitialized": "NVML_ERROR_UNINITIALIZED",
    "not_supported": "NVML_ERROR_NOT_SUPPORTED",
    "no_permission": "NVML_ERROR_NO_PERMISSION",
    "driver_not_loaded": "NVML_ERROR_DRIVER_NOT_LOADED",
    "timeout": "NVML_ERROR_TIMEOUT",
    "library_not_found": "NVML_ERROR_LIBRARY_NOT_FOUND",
    "function_not_found": "NVML_ERROR_FUNCTION_NOT_FOUND",
    "corrupted_inforom": "NVML_ERROR_CORRUPTED_INFOROM",
    "gpu_lost": "NVML_ERROR_GPU_IS_LOST",
    "reset_required": "NVML_ERROR_RESET_REQUIRED",
    "driver_library_mismatch": "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
    "insufficient_power": "NVML_ERROR_INSUFFICIENT_POWER",
    "irq_issue": "NVML_ERROR_IRQ_ISSUE",
}
FABRIC_MACROS = {"not_supported": "NOT_SUPPORTED", "not_started": "NOT_STARTED",
                 "in_progress": "IN_PROGRESS", "completed": "COMPLETED"}
# The pynvml constants agent/nvml/readers.py and agent/nvml/events.py pass to NVML.
USED_CONSTANTS = (
    "NVML_TEMPERATURE_GPU", "NVML_TEMPERATURE_THRESHOLD_SLOWDOWN",
    "NVML_TEMPERATURE_THRESHOLD_SHUTDOWN", "NVML_VOLATILE_ECC", "NVML_AGGREGATE_ECC",
    "NVML_MEMORY_ERROR_TYPE_CORRECTED", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED",
    "NVML_FEATURE_ENABLED", "NVML_DEVICE_MIG_ENABLE", "NVML_DEVICE_MIG_DISABLE",
    "NVML_SUCCESS", "NVML_ERROR_INVALID_ARGUMENT", "NVML_ERROR_NOT_SUPPORTED",
    "NVML_ERROR_NOT_FOUND", "NVML_GPU_INSTANCE_PROFILE_COUNT",
    "NVML_CLOCK_GRAPHICS", "NVML_CLOCK_MEM", "NVML_DEVICE_VBIOS_VERSION_BUFFER_SIZE",
    "NVML_DEVICE_INFOROM_VERSION_BUFFER_SIZE", "NVML_DEVICE_PART_NUMBER_BUFFER_SIZE",
)
# The simulated H100's GPU instance profiles (tests/nvml_sim/scenarios/mig-*.json) -> the nvml.h
# NVML_GPU_INSTANCE_PROFILE_<suffix> each one's index must be: slices from the name, REV1 =
# "+me" (media extensions) and REV2 = the 1-slice profile with twice the memory, as
# NVIDIA/go-nvlib pkg/nvlib/device/mig_profile.go (NewMigProfile) maps them.
MIG_PROFILE_MACROS = {
    "MIG 1g.10gb": "1_SLICE", "MIG 1g.10gb+me": "1_SLICE_REV1", "MIG 1g.20gb": "1_SLICE_REV2",
    "MIG 2g.20gb": "2_SLICE", "MIG 3g.40gb": "3_SLICE", "MIG 4g.40gb": "4_SLICE",
    "MIG 7g.80gb": "7_SLICE",
}
# Field ids for the counters the snapshot carries (ECC totals, row remapping).
FIELD_IDS = (
    "NVML_FI_DEV_ECC_CURRENT", "NVML_FI_DEV_ECC_PENDING", "NVML_FI_DEV_ECC_SBE_VOL_TOTAL",
    "NVML_FI_DEV_ECC_DBE_VOL_TOTAL", "NVML_FI_DEV_ECC_SBE_AGG_TOTAL",
    "NVML_FI_DEV_ECC_DBE_AGG_TOTAL", "NVML_FI_DEV_RETIRED_PENDING", "NVML_FI_DEV_REMAPPED_COR",
    "NVML_FI_DEV_REMAPPED_UNC", "NVML_FI_DEV_REMAPPED_PENDING", "NVML_FI_DEV_REMAPPED_FAILURE",
)


def _header() -> Dict[str, int]:
    """Every integer #define and enum member of nvml.h, aliases resolved."""
    text = simlib.find_nvml_header().read_text()
    values: Dict[str, int] = {}
    aliases: Dict[str, str] = {}
    for name, value in re.findall(r"^\s*#define\s+(\w+)\s+\(?(0x[0-9A-Fa-f]+|\d+)(?:U?LL|U)?\)?",
                                  text, re.M):
        values[name] = int(value, 0)
    for name, target in re.findall(r"^\s*#define\s+(nvml\w+|NVML_\w+)\s+(nvml\w+|NVML_\w+)\s*(?://.*)?$",
                                   text, re.M):
        aliases[name] = target
    for name, value in re.findall(r"^\s*(NVML_\w+)\s*=\s*(0x[0-9A-Fa-f]+|\d+)\s*,?", text, re.M):
        values.setdefault(name, int(value, 0))
    for name, target in aliases.items():
        if name not in values and target in values:
            values[name] = values[target]
    return values


HEADER = _header()


def _reason_bit(suffix: str) -> int:
    for prefix in ("nvmlClocksEventReason", "nvmlClocksThrottleReason"):
        if prefix + suffix in HEADER:
            return HEADER[prefix + suffix]
    raise AssertionError(f"nvml.h defines no clocks event reason {suffix}")


def test_the_header_is_the_one_nvidia_ships():
    path = simlib.find_nvml_header()
    assert "site-packages" in str(path) and path.parts[-4] == "nvidia"
    assert HEADER["NVML_ERROR_UNKNOWN"] == 999  # sanity: the parser saw the enums


@pytest.mark.parametrize("name", list(REASON_MACROS))
def test_clock_event_bit_matches_nvml_h(name):
    """Mutation 'two clock-event bits swapped' (HW thermal slowdown <-> another reason)."""
    ours = {n: bit for bit, n in nvml_readers.CLOCK_EVENT_BITS}
    assert ours.get(name) == _reason_bit(REASON_MACROS[name]), name


def test_every_reason_bit_decodes_to_its_own_name_only():
    for name, suffix in REASON_MACROS.items():
        assert nvml_readers.decode_clock_events(_reason_bit(suffix)) == [name]
    assert nvml_readers.decode_clock_events(0) == []
    # A bit nvml.h defines that we do not name is reported, never dropped.
    board = _reason_bit("BoardLimit")
    assert nvml_readers.decode_clock_events(board) == [f"unknown_0x{board:x}"]


def _snapshot(mask: int):
    gpu = {"index": 0, "uuid": "GPU-0", "pci_bus_id": "00000000:1A:00.0",
           "temperature": {"gpu_c": 40, "slowdown_c": 87, "shutdown_c": 92},
           "clock_event_reasons": {"mask": mask,
                                   "active": nvml_readers.decode_clock_events(mask)}}
    return {"schema_version": 1, "source": "nvml", "error": None, "gpus": [gpu]}


@pytest.mark.parametrize("suffix, fault", [
    ("HwSlowdown", True), ("HwThermalSlowdown", True), ("HwPowerBrakeSlowdown", True),
    ("SwThermalSlowdown", True), ("GpuIdle", False), ("SyncBoost", False),
    ("SwPowerCap", False), ("ApplicationsClocksSetting", False), ("DisplayClockSetting", False),
])
def test_gpu_thermal_judges_the_bit_nvml_h_defines(tmp_path, suffix, fault):
    """Mutation 'clock-event bits swapped': the mask is the header's bit for the reason, so
    a swapped table decodes a hardware thermal slowdown as something harmless and passes."""
    (tmp_path / "root").mkdir()
    host = Host(tmp_path / "root", gpus=StaticGpus(_snapshot(_reason_bit(suffix))))
    out = GPU_THERMAL.run(host, ResolvedPolicy(load_policy(1), "dra"))
    assert out.status == (Status.FAIL if fault else Status.PASS), (suffix, out.summary)


def test_fabric_states_match_nvml_h():
    ours = {value: name for value, name in nvml_readers.FABRIC_STATES.items()}
    expected = {HEADER[f"NVML_GPU_FABRIC_STATE_{m}"]: n for n, m in FABRIC_MACROS.items()}
    assert ours == expected


@pytest.mark.parametrize("kind", list(ERROR_MEMBERS))
def test_error_kind_matches_nvml_h(kind):
    ours = {k: code for code, k in nvml_readers.ERROR_KINDS.items()}
    assert ours.get(kind) == HEADER[ERROR_MEMBERS[kind]]


def test_error_kinds_name_no_other_code():
    assert sorted(nvml_readers.ERROR_KINDS.values()) == sorted(ERROR_MEMBERS)


@pytest.mark.parametrize("name", USED_CONSTANTS + FIELD_IDS)
def test_pynvml_constant_matches_nvml_h(name):
    assert getattr(pynvml, name) == HEADER[name], name


def test_xid_event_type_matches_nvml_h():
    assert pynvml.nvmlEventTypeXidCriticalError == HEADER["nvmlEventTypeXidCriticalError"] == 0x8


@pytest.mark.parametrize("scenario", ["mig-enabled.json", "mig-no-instances.json",
                                      "mig-mixed.json"])
def test_simulated_mig_profiles_sit_at_the_nvml_h_profile_index(scenario):
    profiles = simlib.resolve(scenario)["defaults"]["mig_profiles"]
    assert {p["name"]: p["index"] for p in profiles} == {
        name: HEADER[f"NVML_GPU_INSTANCE_PROFILE_{suffix}"]
        for name, suffix in MIG_PROFILE_MACROS.items()}
