"""checks/gpu/mig_mode.py, whole Outcome per branch: the strategy's default, a GPU that cannot
run MIG under strategy single, the DRA paths' note, devices read only with MIG enabled, a
pending change with no current mode, and a devices list holding a non-object.

Expected values are written by hand from the module's docstring and messages, from
docs/config.md (`gpu.mig_strategy` defaults to `none`: MIG must be disabled), from
docs/gpu-snapshot.md (`mig` is {current, pending, devices}; `devices` lists the MIG devices of
a GPU whose current mode is `enabled`) and from checks/policy_v2.yaml's gpu.mig
(no_instances: fail; strategy_paths: device-plugin, operator-clusterpolicy).
"""
import copy
from typing import Any, Dict, List, Mapping, Optional

from agent.config import Config
from agent.host.seam import Host, StaticGpus
from agent.model import Outcome, Status
from checks.gpu.mig_mode import MIG_MODE
from checks.policy import ResolvedPolicy, load_policy

BUS0 = "00000000:1A:00.0"
BUS1 = "00000000:1B:00.0"
DEVICE = {"uuid": "MIG-1", "profile": "1g.10gb", "gpu_instance_id": 7, "compute_instance_id": 0}


def run(gpus: List[Dict[str, Any]], path: str = "device-plugin",
        settings: Optional[Mapping[str, Any]] = None) -> Outcome:
    host = Host("/nonexistent-root", gpus=StaticGpus({"gpus": copy.deepcopy(gpus)}))
    return MIG_MODE.run(host, ResolvedPolicy(load_policy(2), path, settings=settings))


def strategy(word: str) -> Dict[str, Any]:
    return Config(gpu={"mig_strategy": word}).model_dump()


def gpu(index: int, mig: Any) -> Dict[str, Any]:
    return {"index": index, "pci_bus_id": (BUS0, BUS1)[index], "mig": mig}


def enabled(*devices: Any) -> Dict[str, Any]:
    return {"current": "enabled", "pending": "enabled", "devices": list(devices)}


def test_the_strategy_defaults_to_none_when_the_config_sets_no_strategy():
    # settings without a gpu section: docs/config.md's default, none (MIG must be disabled).
    mig = enabled(DEVICE)
    got = run([gpu(0, mig)], settings={})
    assert got == Outcome(
        Status.FAIL, f"GPU 0 ({BUS0}) has MIG enabled but the MIG strategy is none",
        {"strategy": "none", "mig_enabled_gpus": [0], "mig_devices": {0: 1},
         "per_gpu": {0: mig}, "lost_gpus": [], "unsupported_gpus": [],
         "gpus_at_fault": [{"index": 0, "pci_bus_id": BUS0}]},
        code="mig-strategy-mismatch")


def test_a_gpu_without_mig_under_strategy_single_is_a_strategy_mismatch():
    mig = enabled(DEVICE)
    no_mig = {"index": 0, "pci_bus_id": BUS0, "mig": None,
              "errors": {"mig": {"kind": "not_supported", "message": "Not Supported"}}}
    got = run([no_mig, gpu(1, mig)], settings=strategy("single"))
    # The finding is filed after the loop, naming the GPU by index only: no gpus_at_fault.
    assert got == Outcome(
        Status.FAIL, "GPU 0 cannot run MIG (strategy single)",
        {"strategy": "single", "mig_enabled_gpus": [1], "mig_devices": {1: 1},
         "per_gpu": {1: mig}, "lost_gpus": [], "unsupported_gpus": [0]},
        code="mig-strategy-mismatch")


def test_a_dra_path_passes_with_the_note_that_the_word_is_not_judged():
    mig = enabled(DEVICE)
    got = run([gpu(0, mig)], path="dra", settings=strategy("none"))
    assert got == Outcome(
        Status.PASS, "MIG current == pending on 1 GPU(s); the MIG strategy is not judged on dra "
        "(the DRA driver publishes MIG devices itself)",
        {"strategy": "none", "mig_enabled_gpus": [0], "mig_devices": {0: 1},
         "strategy_judged": False,
         "strategy_note": "gpu.mig_strategy is the device plugin's; on dra the DRA driver "
                          "publishes MIG devices itself (gpu.mig.strategy_paths)",
         "per_gpu": {0: mig}, "lost_gpus": [], "unsupported_gpus": []})


def test_devices_are_not_read_on_a_gpu_with_mig_disabled():
    # An empty devices list on a MIG-disabled GPU is no "MIG enabled, no MIG device" finding.
    mig = {"current": "disabled", "pending": "disabled", "devices": []}
    got = run([gpu(0, mig)], settings=strategy("none"))
    assert got == Outcome(
        Status.PASS, "MIG current == pending on 1 GPU(s), consistent with strategy none",
        {"strategy": "none", "mig_enabled_gpus": [], "per_gpu": {0: mig}, "lost_gpus": [],
         "unsupported_gpus": []})


def test_a_pending_change_with_no_current_mode_names_it_unknown():
    mig = {"current": None, "pending": "enabled"}
    got = run([gpu(0, mig)], settings=strategy("none"))
    assert got == Outcome(
        Status.FAIL, f"GPU 0 ({BUS0}) MIG enabled is pending (current unknown): takes effect at "
        "the next GPU reset",
        {"strategy": "none", "mig_enabled_gpus": [], "per_gpu": {0: mig}, "lost_gpus": [],
         "unsupported_gpus": [], "gpus_at_fault": [{"index": 0, "pci_bus_id": BUS0}]},
        code="mig-change-pending")


def test_a_devices_list_holding_a_non_object_is_malformed():
    got = run([gpu(0, enabled(DEVICE, 7))], settings=strategy("single"))
    assert got == Outcome(
        Status.UNKNOWN, "cannot read MIG mode: malformed snapshot: field gpus[0].mig.devices is "
        "a list, expected a list of objects",
        {"strategy": "single", "mig_enabled_gpus": [], "per_gpu": {}, "lost_gpus": [],
         "unsupported_gpus": []}, code="snapshot-malformed")
