"""fabric-manager judged by PCI and NVML evidence together (checks/gpu/fabric_manager.py's
docstring), on the bundles tests/fixtures/families/fabric.py writes and on copies edited here.

Expected values are facts of the scenarios (families/fabric.py CASES): the PCIe host has 2 GPUs,
no NVSwitch on PCI and no fabric call; the GB200-class tray 4 GPUs with no NVSwitch on PCI, GPU 2
in_progress in the failing one; the HGX host 8 GPUs, 4 NVSwitches, the service inactive."""
import json
import shutil

import pytest

from checks.gpu.fabric_manager import FABRIC_MANAGER
from tests.checks.gpu_support import bus, results
from tests.conftest import BUNDLES, run_cli


def fabric(name, config=None, bundle_dir=None):
    """(rc, fabric-manager's result, the report) for a bundle by name or a copied directory."""
    if bundle_dir is None:
        rc, checks, doc = results(name, config=config)
        return rc, checks["fabric-manager"], doc
    res = run_cli(["check", "--bundle", str(bundle_dir), "--only", "fabric-manager",
                   "--format", "json"])
    assert res.rc in (0, 1), res.err
    doc = res.json()
    return res.rc, {c["id"]: c for c in doc["checks"]}["fabric-manager"], doc


def copy(tmp_path, name):
    dest = tmp_path / name
    shutil.copytree(BUNDLES / name, dest)
    return dest


def test_pcie_host_without_the_fabric_call_is_not_an_nvswitch_system():
    rc, got, doc = fabric("fabric-manager-pcie-no-fabric-call")
    # Was `unknown` (field-unreadable), closing every gate; now not applicable.
    assert (got["status"], got["code"], got["skip"]) == ("skip", None, "not-applicable")
    assert "no NVSwitch on PCI" in got["summary"]
    assert "function_not_found, on GPU 0, 1" in got["summary"]
    assert "fabric-manager" not in doc["gate"]["blocking"]


def test_gb200_class_tray_with_every_gpu_registered_passes_without_asking_the_service():
    rc, got, _ = fabric("fabric-manager-gb200-completed")
    # commands.yaml records no `systemctl is-active`: had the check asked, it would be
    # unknown (service-state-unknown), as on fabric-manager-service-state-unknown.
    assert got["status"] == "pass", got["summary"]
    assert got["summary"].startswith("4 GPU(s) fabric state completed/success")
    assert "no NVSwitch on PCI" in got["summary"]


def test_gb200_class_tray_with_a_gpu_in_progress_fails():
    rc, got, doc = fabric("fabric-manager-gb200-in-progress")
    assert (got["status"], got["code"]) == ("fail", "fabric-not-completed")
    gpu2 = bus("fabric-manager-gb200-in-progress", 2)
    assert got["summary"] == f"GPU 2 ({gpu2}) fabric state in_progress, status success"
    assert rc == 1 and "fabric-manager" in doc["gate"]["blocking"]


def test_hgx_with_nvswitches_and_fabric_not_started_fails_on_the_service_first():
    rc, got, _ = fabric("fabric-manager-hgx-not-started")
    assert (got["status"], got["code"]) == ("fail", "service-inactive")
    assert got["summary"].startswith("nvidia-fabricmanager is inactive on an NVSwitch system; ")
    for i in range(8):
        assert f"GPU {i} ({bus('fabric-manager-hgx-not-started', i)}) fabric state not_started" \
            in got["summary"]
    assert rc == 1


def test_an_hgx_host_on_a_driver_without_the_call_stays_unknown():
    # gpu-old-driver-no-fabric: 4 NVSwitches on PCI, so the missing call hides a fabric.
    _, got, _ = fabric("gpu-old-driver-no-fabric")
    assert (got["status"], got["code"]) == ("unknown", "field-unreadable")


def test_pcie_host_with_an_nvswitch_on_pci_is_unknown(tmp_path):
    dest = copy(tmp_path, "fabric-manager-pcie-no-fabric-call")
    facts = json.loads((dest / "host.json").read_text())
    facts["pci_devices"].append({"slot": "0000:05:00.0", "vendor": "10de", "device": "22a3",
                                 "class": "068000", "driver": "nvidia-nvswitch"})
    (dest / "host.json").write_text(json.dumps(facts))
    _, got, _ = fabric(None, bundle_dir=dest)
    assert (got["status"], got["code"]) == ("unknown", "field-unreadable")


def test_pcie_host_without_a_pci_inventory_is_unknown(tmp_path):
    # No PCI evidence and no NVML evidence: nothing says what the host is.
    dest = copy(tmp_path, "fabric-manager-pcie-no-fabric-call")
    (dest / "host.json").write_text("{}\n")
    _, got, _ = fabric(None, bundle_dir=dest)
    assert (got["status"], got["code"]) == ("unknown", "field-unreadable")


def test_another_nvml_error_on_the_fabric_call_is_still_unknown(tmp_path):
    dest = copy(tmp_path, "fabric-manager-pcie-no-fabric-call")
    snap = json.loads((dest / "gpus.json").read_text())
    snap["gpus"][1]["errors"]["fabric"] = {"kind": "unknown", "message": "Unknown Error",
                                           "nvml_code": 999}
    (dest / "gpus.json").write_text(json.dumps(snap))
    _, got, _ = fabric(None, bundle_dir=dest)
    assert (got["status"], got["code"]) == ("unknown", "field-unreadable")
    assert "fabric: unknown (Unknown Error)" in got["summary"]


def test_a_config_pinned_to_policy_version_1_gets_the_same_verdicts(tmp_path):
    # A false `unknown` fixed, not a new gate: every policy version gets it (docs/decisions.md).
    config = tmp_path / "v1.yaml"
    config.write_text("policy_version: 1\n")
    _, got, _ = fabric("fabric-manager-pcie-no-fabric-call", config=config)
    assert (got["status"], got["skip"]) == ("skip", "not-applicable")
    _, got, _ = fabric("fabric-manager-gb200-in-progress", config=config)
    assert (got["status"], got["code"]) == ("fail", "fabric-not-completed")


@pytest.mark.parametrize("code", ["service-inactive", "fabric-not-completed"])
def test_the_codes_these_bundles_produce_are_declared(code):
    assert FABRIC_MANAGER.failure(code).status.value == "fail"


def test_a_lost_gpu_on_the_pcie_host_leaves_the_verdict_to_the_others(tmp_path):
    # gpu-count owns a lost GPU; the other GPU still has no fabric call and no NVSwitch is on
    # PCI, so fabric-manager stays not applicable, naming only that GPU.
    dest = copy(tmp_path, "fabric-manager-pcie-no-fabric-call")
    snap = json.loads((dest / "gpus.json").read_text())
    snap["gpus"][1]["error"] = {"kind": "gpu_is_lost", "message": "GPU is lost", "nvml_code": 15}
    (dest / "gpus.json").write_text(json.dumps(snap))
    _, got, _ = fabric(None, bundle_dir=dest)
    assert (got["status"], got["skip"]) == ("skip", "not-applicable"), got["summary"]
    assert "function_not_found, on GPU 0)" in got["summary"]
