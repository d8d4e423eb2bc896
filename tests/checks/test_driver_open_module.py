"""driver-open-module: a GPU that needs NVIDIA's open kernel module has it loaded.

Expected values are facts of the sources, written here by hand: Blackwell and Grace Hopper need
the open module (NVIDIA Technical Blog, "NVIDIA Transitions Fully Towards Open-Source GPU
Kernel Modules"); 10de:2901 is GB100 [B200] and 10de:2330 GH100 [H100 SXM5 80GB] in pci.ids;
the open module's NVRM line says "Open Kernel Module" (tests/fixtures/upstream). The check is
not in checks/registry.py until the lead registers it, so it runs through the engine here.
"""
import json
from typing import Any, Dict, List, Optional

import pytest

from agent.config import parse_config
from agent.engine import Engine
from agent.host.bundle import load_bundle
from agent.host.seam import Host, StaticFacts, StaticGpus
from agent.model import SKIP_INPUT_MISSING, SKIP_NOT_APPLICABLE, Status
from checks.driver.open_module import DRIVER_OPEN_MODULE, FIX, OPEN_MODULE_REQUIRED
from checks.policy import ResolvedPolicy, load_policy
from tests.conftest import BUNDLES, bundle

PROPRIETARY = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.173.02  Tue Jun 23 08:38:17 UTC 2026\n"
OPEN = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.173.02  Release Build  "
        "(dvs-builder@U16-A24-9-2)  Thu Oct 10 12:15:00 UTC 2024\n")


def on_bundle(name: str, path: str = "dra") -> Dict[str, Any]:
    cfg_file = BUNDLES / name / "test-config.yaml"
    cfg = parse_config(cfg_file.read_text() if cfg_file.is_file() else "{}\n", "test-config.yaml")
    policy = ResolvedPolicy(load_policy(cfg.policy_version), path, settings=cfg.model_dump())
    loaded = load_bundle(bundle(name))
    try:
        (got,) = Engine([DRIVER_OPEN_MODULE]).run(loaded.host, policy)
    finally:
        loaded.close()
    return {"status": got.status.value, "summary": got.summary, "code": got.code,
            "skip": got.skip, "remediation": got.remediation,
            "details": json.loads(json.dumps(got.details))}


@pytest.mark.parametrize("path", ["device-plugin", "dra", "operator-clusterpolicy",
                                  "operator-gpucluster"])
def test_b200_with_the_proprietary_module_fails_from_pci_alone(path):
    got = on_bundle("driver-open-module-b200-proprietary", path)
    assert (got["status"], got["code"]) == ("fail", OPEN_MODULE_REQUIRED)
    # NVML lists none of them (the GPUs did not initialise): the PCI ids name them.
    assert got["summary"].startswith("proprietary kernel module 580.173.02 loaded; 8 GPU(s) "
                                     "require NVIDIA's open kernel module")
    assert "0000:1a:00.0 (10de:2901)" in got["summary"]
    assert "NVML lists none of them" in got["summary"]
    assert got["details"]["sources"] == ["PCI", "NVML"]
    assert len(got["details"]["gpus_requiring_open"]) == 8
    assert "kernelModuleType" in got["remediation"] and "-open" in got["remediation"]


def test_b200_with_the_open_module_passes():
    got = on_bundle("driver-open-module-b200-open")
    assert got["status"] == "pass", got["summary"]
    assert got["summary"] == "open kernel module 580.173.02 loaded; 8 GPU(s) that require it"
    # NVML and PCI agree on the bus ids: one entry per GPU, named by both.
    first = got["details"]["gpus_requiring_open"][0]
    assert first == {"slot": "0000:1a:00.0", "pci_id": "10de:2901", "name": "NVIDIA B200",
                     "in_nvml": True}


def test_h100_with_the_proprietary_module_passes():
    got = on_bundle("driver-open-module-h100-proprietary")
    assert got["status"] == "pass", got["summary"]
    assert got["summary"] == ("proprietary kernel module 580.173.02 loaded; none of the 8 GPU(s) "
                              "requires the open module (read from PCI and NVML)")


def test_a_config_pinned_to_policy_version_1_does_not_judge_it():
    got = on_bundle("driver-open-module-b200-proprietary-v1")
    assert (got["status"], got["skip"]) == ("skip", SKIP_NOT_APPLICABLE)
    assert got["code"] is None


# -- direct calls -----------------------------------------------------------------------------
def host(tmp_path, version: Optional[str], pci: Any = None,
         gpus: Optional[List[Dict[str, Any]]] = None) -> Host:
    root = tmp_path / "root"
    (root / "proc" / "driver" / "nvidia").mkdir(parents=True)
    if version is not None:
        (root / "proc" / "driver" / "nvidia" / "version").write_text(version)
    facts = {} if pci is None else {"pci_devices": pci}
    snap = None if gpus is None else {"gpus": gpus, "device_count": len(gpus)}
    return Host(root, gpus=StaticGpus(snap), facts=StaticFacts(facts))


def run(h: Host, version: int = 2, path: str = "dra", **driver: Any):
    overrides = {"driver": driver} if driver else None
    return DRIVER_OPEN_MODULE.run(h, ResolvedPolicy(load_policy(version, overrides), path))


def pci_dev(slot: str, device: str, vendor: str = "10de") -> Dict[str, Any]:
    return {"slot": slot, "vendor": vendor, "device": device, "class": "030200", "driver": "nvidia"}


def test_a_mixed_host_names_only_the_gpu_that_needs_it(tmp_path):
    pci = [pci_dev("0000:1a:00.0", "2330"), pci_dev("0000:1b:00.0", "2901", vendor="0x10de")]
    out = run(host(tmp_path, PROPRIETARY, pci))
    assert (out.status, out.code) == (Status.FAIL, OPEN_MODULE_REQUIRED)
    assert "1 GPU(s) require" in out.summary and "0000:1b:00.0 (10de:2901)" in out.summary
    assert "1a:00.0" not in out.summary
    assert "NVML lists" not in out.summary  # no snapshot here: nothing said about NVML
    assert out.remediation == FIX


def test_nvml_names_alone_decide_without_a_pci_inventory(tmp_path):
    gpus = [{"index": 0, "name": "NVIDIA GB200", "pci_bus_id": "00000009:01:00.0"}]
    out = run(host(tmp_path, PROPRIETARY, None, gpus))
    assert out.status == Status.FAIL
    assert "0009:01:00.0 (NVIDIA GB200)" in out.summary
    hopper = [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "pci_bus_id": "00000000:1A:00.0"}]
    ok = run(host(tmp_path / "h", PROPRIETARY, None, hopper))
    assert ok.status == Status.PASS and "read from NVML" in ok.summary


def test_no_pci_inventory_and_no_gpu_in_nvml_is_input_missing(tmp_path):
    out = run(host(tmp_path, PROPRIETARY, None, []))
    assert (out.status, out.skip) == (Status.SKIP, SKIP_INPUT_MISSING)
    # The open module needs no inventory: whatever is there, it is the one required.
    assert run(host(tmp_path / "o", OPEN, None, None)).status == Status.PASS


def test_a_product_name_matches_whole_or_up_to_a_space(tmp_path):
    gpus = [{"index": 0, "name": "NVIDIA B2000", "pci_bus_id": "00000000:1A:00.0"}]
    out = run(host(tmp_path, PROPRIETARY, [pci_dev("0000:1a:00.0", "1234")], gpus))
    assert out.status == Status.PASS, out.summary


def test_version_1_names_no_gpu_so_a_direct_call_is_not_applicable(tmp_path):
    out = run(host(tmp_path, PROPRIETARY, [pci_dev("0000:1b:00.0", "2901")]), version=1)
    assert (out.status, out.skip) == (Status.SKIP, SKIP_NOT_APPLICABLE)
    assert "names no GPU" in out.summary


def test_a_fleet_lists_its_own_products(tmp_path):
    # A fleet holding its L40S to the open module (any product may be listed).
    gpus = [{"index": 0, "name": "NVIDIA L40S", "pci_bus_id": "00000000:1A:00.0"}]
    out = run(host(tmp_path, PROPRIETARY, [pci_dev("0000:1a:00.0", "26b9")], gpus),
              require_open_module={"products": ["NVIDIA L40S"], "pci_device_ids": []})
    assert out.status == Status.FAIL and "10de:26b9, NVIDIA L40S" in out.summary


def test_module_not_loaded_is_driver_loaded_s_and_a_bad_pci_id_is_refused(tmp_path):
    out = run(host(tmp_path, None, [pci_dev("0000:1b:00.0", "2901")]))
    assert out.status == Status.SKIP and out.skip == "needs:driver-loaded"
    with pytest.raises(Exception) as err:
        load_policy(2, {"driver": {"require_open_module": {"pci_device_ids": ["2901"]}}})
    assert "not a PCI vendor:device id" in str(err.value)


def test_odd_pci_values_from_a_bundle_are_not_repeated(tmp_path):
    # host.json is input: a device id that is no 4-digit hex string is shown as "?".
    gpus = [{"index": 0, "name": "NVIDIA B200", "pci_bus_id": "00000000:1A:00.0"}]
    pci = [pci_dev("0000:1a:00.0", "x" * 5000, vendor=None)]
    out = run(host(tmp_path, PROPRIETARY, pci, gpus))
    assert out.status == Status.FAIL
    assert "0000:1a:00.0 (?:?, NVIDIA B200)" in out.summary and "xxxx" not in out.summary
