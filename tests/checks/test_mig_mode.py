"""mig-mode (checks/gpu/mig_mode.py) on fixture bundles and hand-written snapshots: each way it
fails, by its failure code, on the paths where the strategy word applies and where it does not.

Expected values are facts of the scenario files (tests/nvml_sim/scenarios/mig-*.json: 8 H100s,
7 x 1g.10gb each in mig-enabled.json, none in mig-no-instances.json), of the device plugin's
strategies (none: MIG off; single: on everywhere; mixed) and of policy_v2.yaml's gpu.mig.
"""
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

from agent.config import Config
from agent.host.seam import Host, StaticGpus
from agent.model import Status
from checks.gpu.mig_mode import MIG_MODE, NO_INSTANCES_FIX
from checks.policy import ResolvedPolicy, load_policy
from tests.checks.gpu_support import bus, code_on, each_failure, results
from tests.conftest import BUNDLES

BUSES = ["00000000:1A:00.0", "00000000:1B:00.0", "00000000:4A:00.0", "00000000:4B:00.0",
         "00000000:8A:00.0", "00000000:8B:00.0", "00000000:CA:00.0", "00000000:CB:00.0"]


def test_each_failure():
    each_failure("gpu-mig-pending", "mig-mode", "fail", 0, "MIG enabled is pending")


# Every declared code on a bundle that produces it (the contract test asks for one; here
# the summary and the fix are held too). Needles are facts of the scenario files.
@pytest.mark.parametrize("name, check_id, status, code, needle", [
    ("gpu-mig-pending", "mig-mode", "fail", "mig-change-pending",
     "MIG enabled is pending"),
    ("mig-mode-no-instances", "mig-mode", "fail", "mig-no-instances",
     "GPU 0 (00000000:1A:00.0) has MIG enabled but no MIG device"),
    ("mig-mode-field-unreadable", "mig-mode", "unknown", "field-unreadable",
     "GPU 0 (00000000:1A:00.0) mig: nvml_error"),
    ("mig-mode-snapshot-malformed", "mig-mode", "unknown", "snapshot-malformed",
     "gpus[0].mig.current is a list, expected a string"),
])
def test_each_code_on_its_bundle(name, check_id, status, code, needle):
    code_on(name, check_id, status, code, needle)


def test_strategy_mismatch_on_a_device_plugin_path():
    _, checks, doc = results("gpu-mig-enabled", path="device-plugin")
    got = checks["mig-mode"]
    assert (got["status"], got["code"]) == ("fail", "mig-strategy-mismatch")
    for i in range(8):
        assert f"GPU {i} ({bus('gpu-mig-enabled', i)}) has MIG enabled but the MIG strategy " \
               "is none" in got["summary"]
    assert doc["gate"]["open"] is False and "mig-mode" in doc["gate"]["blocking"]


def test_no_instances_names_every_gpu_and_its_fix():
    _, checks, _ = results("mig-mode-no-instances",
                           config=_bundle_config("mig-mode-no-instances"))
    got = checks["mig-mode"]
    assert got["summary"].count("has MIG enabled but no MIG device") == 8
    assert [f"GPU {i} ({BUSES[i]})" in got["summary"] for i in range(8)] == [True] * 8
    assert got["remediation"] == NO_INSTANCES_FIX
    assert got["details"]["mig_devices"] == {str(i): 0 for i in range(8)}


def test_no_instances_keeps_passing_under_policy_version_1():
    name = "mig-mode-no-instances-v1"
    _, checks, _ = results(name, config=_bundle_config(name))
    got = checks["mig-mode"]
    assert got["status"] == "pass", got["summary"]
    assert got["summary"] == "MIG current == pending on 8 GPU(s), consistent with strategy single"


@pytest.mark.parametrize("path", ["dra", "operator-gpucluster"])
def test_a_dra_mig_host_passes_without_a_strategy_word(path):
    name = "mig-mode-dra-no-strategy"
    _, checks, _ = results(name, path=path, config=_bundle_config(name))
    got = checks["mig-mode"]
    assert got["status"] == "pass", got["summary"]
    assert got["summary"] == (f"MIG current == pending on 8 GPU(s); the MIG strategy is not "
                              f"judged on {path} (the DRA driver publishes MIG devices itself)")
    assert got["details"]["strategy_judged"] is False
    assert got["details"]["mig_devices"] == {str(i): 7 for i in range(8)}


@pytest.mark.parametrize("path", ["device-plugin", "operator-clusterpolicy"])
def test_the_same_host_fails_where_the_device_plugin_reads_the_word(path):
    name = "mig-mode-dra-no-strategy"
    _, checks, _ = results(name, path=path, config=_bundle_config(name))
    assert (checks["mig-mode"]["status"], checks["mig-mode"]["code"]) == (
        "fail", "mig-strategy-mismatch")


@pytest.mark.parametrize("strategy, plugin, dra", [
    ("none", "fail", "pass"), ("single", "pass", "pass"), ("mixed", "pass", "pass")])
def test_mig_strategy_from_the_config(tmp_path, strategy, plugin, dra):
    config = tmp_path / "config.yaml"
    config.write_text(f"gpu:\n  mig_strategy: {strategy}\n")
    for path, want in (("device-plugin", plugin), ("dra", dra)):
        _, checks, _ = results("gpu-mig-enabled", path=path, config=config)
        assert checks["mig-mode"]["status"] == want, (path, checks["mig-mode"]["summary"])
    # MIG off everywhere: single needs it on (device-plugin paths only under version 2).
    _, checks, _ = results("gpu-h100-snapshot-only", path="device-plugin", config=config)
    assert checks["mig-mode"]["status"] == ("fail" if strategy == "single" else "pass")
    _, checks, _ = results("gpu-h100-snapshot-only", path="dra", config=config)
    assert checks["mig-mode"]["status"] == "pass"


def test_policy_version_1_still_judges_the_word_on_dra(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("policy_version: 1\ngpu:\n  mig_strategy: none\n")
    _, checks, _ = results("gpu-mig-enabled", path="dra", config=config)
    got = checks["mig-mode"]
    assert (got["status"], got["code"]) == ("fail", "mig-strategy-mismatch")
    assert "strategy_judged" not in got["details"]


def _bundle_config(name: str) -> Path:
    return BUNDLES / name / "test-config.yaml"


# -- hand-written snapshots ------------------------------------------------------------------
def _run(gpus: List[Dict[str, Any]], version: int = 2, path: str = "device-plugin",
         strategy: str = "single"):
    host = Host("/nonexistent-root", gpus=StaticGpus({"gpus": gpus}))
    settings = Config(gpu={"mig_strategy": strategy}).model_dump()
    return MIG_MODE.run(host, ResolvedPolicy(load_policy(version), path, settings=settings))


def _gpu(i: int, current: str = "enabled", pending: Optional[str] = None,
         devices: Any = "absent") -> Dict[str, Any]:
    mig: Dict[str, Any] = {"current": current, "pending": pending or current}
    if devices != "absent":
        mig["devices"] = devices
    return {"index": i, "pci_bus_id": BUSES[i], "mig": mig}


DEVICE = {"uuid": "MIG-1", "profile": "1g.10gb", "gpu_instance_id": 7, "compute_instance_id": 0}


def test_empty_devices_fail_under_version_2_only():
    gpus = [_gpu(0, devices=[]), _gpu(1, devices=[DEVICE])]
    out = _run(gpus)
    assert (out.status, out.code) == (Status.FAIL, "mig-no-instances")
    assert out.summary == ("GPU 0 (00000000:1A:00.0) has MIG enabled but no MIG device (no GPU "
                           "instance with a compute instance): nothing to allocate")
    assert out.details["mig_devices"] == {0: 0, 1: 1}
    assert _run(gpus, version=1).status == Status.PASS


def test_devices_not_read_is_no_finding():
    # Absent = not read (an older snapshot, or the read failed): nothing to judge it by.
    out = _run([_gpu(0), _gpu(1)])
    assert out.status == Status.PASS
    assert "mig_devices" not in out.details


def test_a_pending_change_is_reported_before_the_instances():
    out = _run([_gpu(0, current="disabled", pending="enabled", devices=[])])
    assert (out.status, out.code) == (Status.FAIL, "mig-change-pending")
    assert "no MIG device" not in out.summary


def test_malformed_devices_are_unknown_naming_the_field():
    out = _run([_gpu(0, devices={"0": DEVICE})])
    assert (out.status, out.code) == (Status.UNKNOWN, "snapshot-malformed")
    assert "gpus[0].mig.devices is an object, expected a list of objects" in out.summary


@pytest.mark.parametrize("path, judged", [("device-plugin", True), ("dra", False),
                                          ("operator-clusterpolicy", True),
                                          ("operator-gpucluster", False)])
def test_strategy_paths_of_policy_version_2(path, judged):
    # strategy none with MIG on: a mismatch where a device plugin allocates, nothing on DRA.
    out = _run([_gpu(0, devices=[DEVICE])], path=path, strategy="none")
    assert out.status == (Status.FAIL if judged else Status.PASS), out.summary
    assert ("strategy_judged" not in out.details) is judged
    # version 1 judges the word on every path
    assert _run([_gpu(0, devices=[DEVICE])], version=1, path=path,
                strategy="none").status == Status.FAIL


def test_no_instances_is_judged_on_dra_too():
    out = _run([_gpu(0, devices=[])], path="dra", strategy="none")
    assert (out.status, out.code) == (Status.FAIL, "mig-no-instances")
