"""GPU checks through the real NVML worker, the real pynvml and the simulated libnvidia-ml.

Expected values come from the scenario files (what the library was told to report), never
from the snapshot under test.
"""
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

from agent.config import Config
from agent.engine import Engine
from agent.host.bundle import RecordedCommands
from agent.host.seam import Host, StaticFacts
from agent.report import build_report
from checks.policy import ResolvedPolicy, load_policy
from checks.registry import ALL_CHECKS
from tests.nvml_sim import simlib

pytestmark = pytest.mark.integration

GPU_IDS = [
    "nvml-responsive", "gpu-count", "driver-persistence", "fabric-manager", "mig-mode",
    "gpu-ecc", "gpu-row-remap", "gpu-thermal", "gpu-pcie-link", "gpu-nvlink",
]
GPU_CHECKS = [c for c in ALL_CHECKS if c.id in GPU_IDS]
FM_ACTIVE = [{"argv": ["systemctl", "is-active", "nvidia-fabricmanager"], "rc": 0, "stdout": "active\n"}]


def pci_for(doc: Dict[str, Any], count: Optional[int] = None) -> List[Dict[str, Any]]:
    """NVIDIA PCI functions matching the scenario's GPUs (class 0x0302: 3D controller)."""
    buses = [simlib.field(doc, i, "pci_bus_id") for i in range(len(doc["gpus"]))]
    if count is not None:  # more GPUs on PCI than NVML reports
        base = simlib.resolve("healthy-8xh100.json")
        buses = [simlib.field(base, i, "pci_bus_id") for i in range(count)]
    return [{"slot": b[-12:].lower(), "vendor": "10de", "device": "2330", "class": "030200",
             "driver": "nvidia"} for b in buses]


def run_checks(sim: Any, tmp_path: Path, library: bool = True, pci: Any = "match",
               commands: Any = None, **settings: Any):
    config = Config.model_validate(settings).model_dump()
    host = Host(
        tmp_path / "root",
        commands=RecordedCommands(FM_ACTIVE if commands is None else commands, "test"),
        gpus=sim.source(library=library),
        facts=StaticFacts({"pci_devices": pci_for(sim.doc) if pci == "match" else pci}),
    )
    (tmp_path / "root").mkdir(exist_ok=True)
    results = Engine(GPU_CHECKS).run(host, ResolvedPolicy(load_policy(), "dra", settings=config))
    return {r.id: r for r in results}, host.gpus(), results


def label(doc: Dict[str, Any], i: int) -> str:
    return f"GPU {i} ({simlib.field(doc, i, 'pci_bus_id')})"


@pytest.mark.parametrize("scenario", ["healthy-8xh100.json", "healthy-8xh200.json"])
def test_healthy_scenarios_pass_every_gpu_check_with_every_field_from_the_library(
        nvml_sim, tmp_path, scenario):
    doc = nvml_sim.use(scenario)
    by_id, snap, _ = run_checks(nvml_sim, tmp_path)
    assert {i: r.status.value for i, r in by_id.items()} == {i: "pass" for i in GPU_IDS}
    assert nvml_sim.missing_symbols() == []  # pynvml resolved every function it looked up
    assert snap["error"] is None and snap["errors"] == {}
    assert snap["driver_version"] == doc["driver_version"]
    assert snap["nvml_version"] == doc["nvml_version"]
    assert snap["cuda_driver_version"] == doc["cuda_driver_version"]
    assert len(snap["gpus"]) == len(doc["gpus"]) == 8
    for i, gpu in enumerate(snap["gpus"]):
        f = lambda key, i=i: simlib.field(doc, i, key)  # noqa: E731
        assert gpu["errors"] == {} and "error" not in gpu
        assert (gpu["index"], gpu["uuid"], gpu["name"], gpu["pci_bus_id"]) == (
            i, f("uuid"), f("name"), f("pci_bus_id"))
        assert gpu["memory"] == {"total_bytes": f("memory_total_bytes"),
                                 "used_bytes": f("memory_used_bytes")}
        assert gpu["temperature"] == {"gpu_c": f("temperature_gpu_c"),
                                      "slowdown_c": f("slowdown_threshold_c"),
                                      "shutdown_c": f("shutdown_threshold_c")}
        assert gpu["ecc"]["volatile"] == {"corrected": f("ecc_volatile_corrected"),
                                          "uncorrected": f("ecc_volatile_uncorrected")}
        assert gpu["ecc"]["mode_current"] is bool(f("ecc_mode_current"))
        assert gpu["remapped_rows"]["pending"] is bool(f("remapped_rows_pending"))
        assert gpu["clock_event_reasons"]["mask"] == f("clock_event_reasons")
        assert gpu["pcie"] == {"gen_current": f("pcie_gen_current"), "gen_max": f("pcie_gen_max"),
                               "width_current": f("pcie_width_current"),
                               "width_max": f("pcie_width_max")}
        assert len(gpu["nvlink"]["links"]) == f("nvlink_links")
        assert gpu["fabric"]["state"] == "completed" and f("fabric_state") == 3
        assert gpu["persistence_mode"] is bool(f("persistence_mode"))


def test_every_field_is_read_through_the_library(nvml_sim, tmp_path):
    """A changed scenario value shows up in the snapshot: nothing is a built-in default."""
    doc = simlib.resolve("healthy-8xh100.json")
    doc["defaults"].update(temperature_gpu_c=41, slowdown_threshold_c=80, pcie_width_max=32,
                           memory_total_bytes=12345, nvlink_links=4)
    for gpu in doc["gpus"]:
        gpu.pop("temperature_gpu_c", None)
    nvml_sim.use(doc)
    snap = nvml_sim.client().snapshot()
    assert {g["temperature"]["gpu_c"] for g in snap["gpus"]} == {41}
    assert {g["temperature"]["slowdown_c"] for g in snap["gpus"]} == {80}
    assert {g["pcie"]["width_max"] for g in snap["gpus"]} == {32}
    assert {g["memory"]["total_bytes"] for g in snap["gpus"]} == {12345}
    assert {len(g["nvlink"]["links"]) for g in snap["gpus"]} == {4}


@pytest.mark.parametrize("scenario, check_id, status, gpu, needle", [
    ("gpu-lost.json", "gpu-count", "fail", None, "GPU 3 not usable: gpu_lost (GPU is lost); PCI "),
    ("ecc-uncorrectable.json", "gpu-ecc", "fail", 2, "2 volatile uncorrectable ECC error(s)"),
    ("remap-pending.json", "gpu-row-remap", "warn", 1, "row remap pending"),
    ("remap-failure.json", "gpu-row-remap", "fail", 6, "row remapping failed"),
    ("hw-slowdown.json", "gpu-thermal", "fail", 5, "hw_slowdown, hw_power_brake_slowdown active"),
    ("hot-gpu.json", "gpu-thermal", "fail", 3, "at 88 C, slowdown threshold 87 C"),
    ("pcie-x8.json", "gpu-pcie-link", "fail", 1, "PCIe link x8 of x16"),
    ("nvlink-down.json", "gpu-nvlink", "fail", 6, "NVLink 3 inactive (17 of 18 active)"),
    ("mig-pending.json", "mig-mode", "fail", 0, "MIG enabled is pending (current disabled)"),
    ("fabric-in-progress.json", "fabric-manager", "fail", 4, "fabric state in_progress"),
    ("persistence-off.json", "driver-persistence", "fail", 7, "persistence mode off"),
])
def test_failure_scenarios(nvml_sim, tmp_path, scenario, check_id, status, gpu, needle):
    doc = nvml_sim.use(scenario)
    by_id, _, results = run_checks(nvml_sim, tmp_path)
    result = by_id[check_id]
    assert result.status.value == status, result.summary
    if gpu is None:  # a lost GPU has no bus id in NVML: gpu-count names its PCI slot
        slot = simlib.field(doc, 3, "pci_bus_id")[-12:].lower()
        assert needle + slot + " unreadable in NVML" in result.summary
    else:
        assert label(doc, gpu) in result.summary and needle in result.summary
    assert by_id["nvml-responsive"].status.value == "pass"
    others = {i: r.status.value for i, r in by_id.items() if i != check_id}
    assert set(others.values()) == {"pass"}, others
    gate = build_report(results, "dra", False, "t", 0.0, "t").gate
    critical = next(c for c in GPU_CHECKS if c.id == check_id).severity.value == "critical"
    assert gate.open is not (critical and status == "fail")


def test_lost_gpu_is_named_by_the_health_checks_and_left_to_gpu_count(nvml_sim, tmp_path):
    nvml_sim.use("gpu-lost.json")
    by_id, snap, _ = run_checks(nvml_sim, tmp_path)
    assert snap["gpus"][3]["error"]["kind"] == "gpu_lost"
    assert snap["gpus"][3]["error"]["nvml_code"] == 15
    assert by_id["gpu-ecc"].status.value == "pass" and "GPU 3 lost" in by_id["gpu-ecc"].summary
    assert by_id["gpu-ecc"].details["lost_gpus"] == [3]


def test_a_lower_pcie_generation_at_idle_is_not_a_fault(nvml_sim, tmp_path):
    nvml_sim.use({"base": "healthy-8xh100.json", "gpu_overrides": {"2": {"pcie_gen_current": 1}}})
    by_id, _, _ = run_checks(nvml_sim, tmp_path)
    assert by_id["gpu-pcie-link"].status.value == "pass"
    assert "GPU 2 at a lower generation" in by_id["gpu-pcie-link"].summary


@pytest.mark.parametrize("scenario, library, needle", [
    ("driver-mismatch.json", True, "Driver/library version mismatch"),
    ("no-permission.json", True, "insufficient permissions"),
    ("function-not-found.json", True, "lacks a function NVML needs at init (driver too old)"),
    ("healthy-8xh100.json", False, "libnvidia-ml.so.1 not found"),
])
def test_nvml_level_errors_fail_nvml_responsive_and_skip_the_rest(
        nvml_sim, tmp_path, scenario, library, needle):
    nvml_sim.use(scenario)
    by_id, snap, _ = run_checks(nvml_sim, tmp_path, library=library)
    assert by_id["nvml-responsive"].status.value == "fail"
    assert needle in by_id["nvml-responsive"].summary
    for cid in GPU_IDS[1:]:
        assert by_id[cid].status.value == "skip"
        assert by_id[cid].summary == "needs nvml-responsive (fail)"


# An HGX baseboard's NVSwitches enumerate as PCI bridges, class 0x0680 (pci.ids 10de:22a3
# "GH100 [H100 NVSwitch]"): what tells an NVSwitch system from a PCIe one on PCI.
NVSWITCHES = [{"slot": f"0000:{bus:02x}:00.0", "vendor": "10de", "device": "22a3",
               "class": "068000", "driver": "nvidia"} for bus in (0x05, 0x06, 0x07, 0x08)]


def test_old_driver_without_a_function_is_unknown_not_pass(nvml_sim, tmp_path):
    doc = nvml_sim.use("old-driver-no-fabric.json")
    by_id, snap, _ = run_checks(nvml_sim, tmp_path, pci=pci_for(doc) + NVSWITCHES)
    assert snap["gpus"][0]["errors"]["fabric"]["kind"] == "function_not_found"
    assert by_id["fabric-manager"].status.value == "unknown"
    assert "function_not_found" in by_id["fabric-manager"].summary


def test_old_driver_on_a_pcie_host_has_no_fabric_to_judge(nvml_sim, tmp_path):
    # No NVSwitch on PCI and no fabric call: a PCIe host, not an unknown NVSwitch system.
    nvml_sim.use("old-driver-no-fabric.json")
    by_id, _, _ = run_checks(nvml_sim, tmp_path)
    assert by_id["fabric-manager"].status.value == "skip"
    assert by_id["fabric-manager"].skip == "not-applicable"


def test_fabric_manager_inactive_fails_on_an_nvswitch_system(nvml_sim, tmp_path):
    doc = nvml_sim.use("healthy-8xh100.json")
    inactive = [{"argv": ["systemctl", "is-active", "nvidia-fabricmanager"], "rc": 3,
                 "stdout": "inactive\n"}]
    by_id, _, _ = run_checks(nvml_sim, tmp_path, commands=inactive, pci=pci_for(doc) + NVSWITCHES)
    assert by_id["fabric-manager"].status.value == "fail"
    assert "nvidia-fabricmanager is inactive" in by_id["fabric-manager"].summary


@pytest.mark.parametrize("strategy, status", [("none", "fail"), ("single", "pass"), ("mixed", "pass")])
def test_mig_strategy(nvml_sim, tmp_path, strategy, status):
    nvml_sim.use({"base": "healthy-8xh100.json",
                  "gpu_overrides": {str(i): {"mig_current": 1, "mig_pending": 1} for i in range(8)}})
    by_id, _, _ = run_checks(nvml_sim, tmp_path, gpu={"mig_strategy": strategy})
    assert by_id["mig-mode"].status.value == status, by_id["mig-mode"].summary


def test_pci_shows_eight_nvml_seven(nvml_sim, tmp_path):
    doc = nvml_sim.use("seven-gpus.json")
    by_id, _, _ = run_checks(nvml_sim, tmp_path, pci=pci_for(doc, count=8))
    missing = simlib.field(simlib.resolve("healthy-8xh100.json"), 7, "pci_bus_id")[-12:].lower()
    assert by_id["gpu-count"].status.value == "fail"
    assert f"8 NVIDIA GPU(s) on PCI but NVML sees 7 (not in NVML: {missing})" in by_id["gpu-count"].summary


def test_expected_gpus_from_the_config(nvml_sim, tmp_path):
    nvml_sim.use("healthy-8xh100.json")
    by_id, _, _ = run_checks(nvml_sim, tmp_path, expected_gpus=4)
    assert by_id["gpu-count"].status.value == "fail"
    assert "8 usable GPU(s), config expects 4" in by_id["gpu-count"].summary
