"""The simulated library's scenarios hold NVIDIA's mock-profile values, and every scenario
resolves; plus the worker's pure decoders."""
import json
from pathlib import Path

import pytest
import yaml

from agent.nvml.readers import CLOCK_EVENT_BITS, decode_clock_events
from tests.nvml_sim import simlib

UPSTREAM = Path(__file__).resolve().parents[1] / "fixtures" / "upstream"


def test_healthy_h100_scenario_matches_nvidias_mock_profile():
    profile = yaml.safe_load((UPSTREAM / "k8s-test-infra.nvml-mock-profile.h100.yaml").read_text())
    dev = profile["device_defaults"]
    doc = simlib.resolve("healthy-8xh100.json")
    d = doc["defaults"]
    assert doc["driver_version"] == profile["system"]["driver_version"]
    assert doc["nvml_version"] == profile["system"]["nvml_version"]
    assert d["name"] == dev["name"]
    assert d["memory_total_bytes"] == dev["memory"]["total_bytes"]
    assert d["slowdown_threshold_c"] == dev["thermal"]["slowdown_threshold_c"]
    assert d["shutdown_threshold_c"] == dev["thermal"]["shutdown_threshold_c"]
    assert d["max_operating_c"] == dev["thermal"]["max_operating_c"]
    assert (d["pcie_gen_max"], d["pcie_width_max"]) == (dev["pcie"]["max_link_gen"], dev["pcie"]["max_link_width"])
    assert d["nvlink_links"] == profile["nvlink"]["links_per_gpu"]
    assert d["pci_device_id"] == dev["pci"]["device_id"]
    assert bool(d["persistence_mode"]) is (dev["persistence_mode"] == "enabled")
    assert (d["board_part_number"], d["vbios_version"], d["inforom_image_version"]) == (
        dev["board_part_number"], dev["vbios_version"], dev["inforom"]["image_version"])
    assert (d["power_limit_mw"], d["power_enforced_mw"]) == (
        dev["power"]["default_limit_mw"], dev["power"]["enforced_limit_mw"])
    assert (d["app_clock_graphics_mhz"], d["app_clock_memory_mhz"]) == (
        dev["clocks"]["graphics_app"], dev["clocks"]["memory_app"])
    for i, want in enumerate(profile["devices"]):
        assert simlib.field(doc, i, "uuid") == want["uuid"]
        # NVML prints an 8-digit PCI domain where the profile writes 4.
        assert simlib.field(doc, i, "pci_bus_id") == "0000" + want["pci"]["bus_id"]
    assert doc["defaults"]["temperature_gpu_c"] == dev["thermal"]["temperature_gpu_c"]


@pytest.mark.parametrize("name", sorted(p.name for p in simlib.SCENARIOS.glob("*.json")))
def test_every_scenario_resolves_to_a_flat_document(name):
    doc = simlib.resolve(name)
    assert "base" not in doc and "gpu_overrides" not in doc
    assert 0 <= len(doc["gpus"]) <= 64 and "defaults" in doc
    json.dumps(doc)


def test_clock_event_reasons_decode_every_nvml_bit():
    assert decode_clock_events(0) == []
    assert decode_clock_events(0x88) == ["hw_slowdown", "hw_power_brake_slowdown"]
    every = sum(bit for bit, _ in CLOCK_EVENT_BITS)
    assert len(decode_clock_events(every)) == len(CLOCK_EVENT_BITS)
    assert decode_clock_events(0x1000) == ["unknown_0x1000"]
