"""The GPU checks on fixture bundles (tests/fixtures/bundles/gpu-*): pass, and each way each
one fails. Each bundle's gpus.json was read by the real worker from the simulated library
(tests/fixtures/make_gpu_bundles.py); expected values are facts of the scenario files."""
import json

import pytest

from tests.conftest import BUNDLES, bundle, run_cli

GPU_IDS = ("nvml-responsive,gpu-count,driver-persistence,fabric-manager,mig-mode,gpu-ecc,"
           "gpu-row-remap,gpu-thermal,gpu-pcie-link,gpu-nvlink")
CRITICAL = {"nvml-responsive", "gpu-count", "mig-mode", "fabric-manager", "gpu-ecc", "gpu-row-remap"}


def results(name, path="dra", config=None, extra=()):
    args = ["check", "--bundle", bundle(name), "--path", path, "--only", GPU_IDS, "--format", "json"]
    if config is not None:
        args += ["--config", str(config)]
    res = run_cli(args + list(extra))
    assert res.rc in (0, 1), res.err
    doc = res.json()
    return res.rc, {c["id"]: c for c in doc["checks"]}, doc


def bus(name, index):
    return json.loads((BUNDLES / name / "gpus.json").read_text())["gpus"][index]["pci_bus_id"]


@pytest.mark.parametrize("name", ["gpu-h100-snapshot-only", "gpu-h200-snapshot-only"])
@pytest.mark.parametrize("path", ["device-plugin", "dra", "operator-clusterpolicy", "operator-gpucluster"])
def test_healthy_bundles_pass_every_gpu_check(name, path):
    rc, checks, doc = results(name, path)
    assert {i: c["status"] for i, c in checks.items()} == {i: "pass" for i in GPU_IDS.split(",")}
    assert rc == 0 and doc["gate"]["open"] is True


@pytest.mark.parametrize("name, check_id, status, gpu, needle", [
    ("gpu-lost", "gpu-count", "fail", None, "GPU 3 not usable: gpu_lost"),
    ("gpu-pci8-nvml7", "gpu-count", "fail", None, "8 NVIDIA GPU(s) on PCI but NVML sees 7"),
    ("gpu-ecc-uncorrectable", "gpu-ecc", "fail", 2, "2 volatile uncorrectable ECC error(s)"),
    ("gpu-ecc-sticky", "gpu-ecc", "fail", None, "GPU 2 (0000:4a:00.0) 2 volatile uncorrectable "
     "ECC error(s) recorded this boot, not yet reset"),
    ("gpu-remap-pending", "gpu-row-remap", "warn", 1, "row remap pending: needs a GPU reset"),
    ("gpu-remap-failure", "gpu-row-remap", "fail", 6, "row remapping failed"),
    ("gpu-hw-slowdown", "gpu-thermal", "fail", 5, "hw_slowdown, hw_power_brake_slowdown active"),
    ("gpu-hot", "gpu-thermal", "fail", 3, "at 88 C, slowdown threshold 87 C"),
    ("gpu-pcie-x8", "gpu-pcie-link", "fail", 1, "PCIe link x8 of x16"),
    ("gpu-nvlink-down", "gpu-nvlink", "fail", 6, "NVLink 3 inactive"),
    ("gpu-mig-pending", "mig-mode", "fail", 0, "MIG enabled is pending"),
    ("gpu-mig-enabled", "mig-mode", "fail", 0, "has MIG enabled but the MIG strategy is none"),
    ("gpu-fabric-in-progress", "fabric-manager", "fail", 4, "fabric state in_progress, status success"),
    ("gpu-fabricmanager-inactive", "fabric-manager", "fail", None, "nvidia-fabricmanager is inactive"),
    ("gpu-old-driver-no-fabric", "fabric-manager", "unknown", 0, "fabric: function_not_found"),
    ("gpu-persistence-off", "driver-persistence", "fail", 0, "persistence mode off"),
    # nvml-responsive's rows: tests/checks/test_nvml_responsive.py
])
def test_each_failure(name, check_id, status, gpu, needle):
    rc, checks, doc = results(name)
    got = checks[check_id]
    assert got["status"] == status, got["summary"]
    assert needle in got["summary"]
    if gpu is not None:
        assert f"GPU {gpu} ({bus(name, gpu)})" in got["summary"]
    if check_id == "nvml-responsive":
        dependents = [c for i, c in checks.items() if i != check_id]
        assert all(c["status"] == "skip" and "nvml-responsive" in c["summary"] for c in dependents)
    else:
        others = {i: c["status"] for i, c in checks.items() if i != check_id}
        assert set(others.values()) == {"pass"}, others
    # Gating (README): critical checks close every path's gate on fail/unknown.
    closes = check_id in CRITICAL and status in ("fail", "unknown")
    assert doc["gate"]["open"] is not closes and rc == (1 if closes else 0)
    assert (check_id in doc["gate"]["blocking"]) is closes


def test_warnings_close_the_gate_only_with_strict():
    rc, checks, doc = results("gpu-pcie-x8", extra=["--strict"])
    assert rc == 1 and doc["gate"]["blocking"] == ["gpu-pcie-link"]


@pytest.mark.parametrize("strategy, status", [("none", "fail"), ("single", "pass"), ("mixed", "pass")])
def test_mig_strategy_from_the_config(tmp_path, strategy, status):
    config = tmp_path / "config.yaml"
    config.write_text(f"gpu:\n  mig_strategy: {strategy}\n")
    _, checks, _ = results("gpu-mig-enabled", config=config)
    assert checks["mig-mode"]["status"] == status
    _, checks, _ = results("gpu-h100-snapshot-only", config=config)
    assert checks["mig-mode"]["status"] == ("fail" if strategy == "single" else "pass")


def test_expected_gpus_from_the_config(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("expected_gpus: 16\n")
    _, checks, _ = results("gpu-h100-snapshot-only", config=config)
    assert checks["gpu-count"]["status"] == "fail"
    assert "8 usable GPU(s), config expects 16" in checks["gpu-count"]["summary"]


def test_policy_thresholds_are_data(tmp_path):
    """Raising the volatile threshold above the bundle's count (2) turns the fail into a
    warn for the aggregate count, which the policy still flags."""
    config = tmp_path / "config.yaml"
    config.write_text("policy:\n  gpu:\n    ecc:\n      volatile_uncorrected_max: 2\n")
    _, checks, _ = results("gpu-ecc-uncorrectable", config=config)
    assert checks["gpu-ecc"]["status"] == "warn"
    assert "2 aggregate uncorrectable" in checks["gpu-ecc"]["summary"]


def test_a_lower_generation_at_idle_is_reported_but_not_a_fault():
    _, checks, _ = results("gpu-pcie-x8")
    assert checks["gpu-pcie-link"]["details"]["gen_downshifted_gpus"] == [2]
    assert "GPU 2" not in checks["gpu-pcie-link"]["summary"]  # only GPU 1's width is a fault
