"""checks/gpu/fabric_manager.py, whole Outcome per branch: HGX (NVSwitch on PCI) with the
service active, inactive or unreadable; a GB200-class tray (no NVSwitch on PCI) passing,
failing and unreadable; hosts that are not NVSwitch systems; the PCI class match.

Expected values are written by hand from the module's docstring and messages, from
docs/gpu-snapshot.md (`fabric` is {state, status, status_code, clique_id}; a field that failed
is null with errors[<field>] naming the NVML error), from systemctl(1) (`is-active` prints the
unit state and exits 0 only for an active unit) and from checks/policy_v1.yaml's gpu.fabric
(ok_states [completed], nvswitch_pci_classes ["0680"]).
"""
import copy
from typing import Any, Dict, List, Optional, Sequence, Tuple

import pytest

from agent.config import Config
from agent.host.seam import Host, StaticFacts, StaticGpus
from agent.hostview import CommandResult
from agent.model import Outcome, Status
from checks.gpu.fabric_manager import FABRIC_MANAGER
from checks.policy import ResolvedPolicy, load_policy

BUS0 = "00000000:18:00.0"
BUS1 = "00000000:2A:00.0"
ARGV = ("systemctl", "is-active", "nvidia-fabricmanager")
COMPLETED = {"state": "completed", "status": "success", "status_code": 0, "clique_id": 0}
NO_CALL = {"kind": "function_not_found", "message": "Function Not Found", "nvml_code": 13}
# A GPU function (class 0x0302, 3D controller) and an NVSwitch (class 0x0680, pci.ids 10de:22a3).
GPU_FN = {"slot": "0000:18:00.0", "vendor": "10de", "device": "2330", "class": "030200",
          "driver": "nvidia"}
NVSWITCH = {"slot": "0000:05:00.0", "vendor": "10de", "device": "22a3", "class": "068000",
            "driver": "nvidia-nvswitch"}
NA = "not-applicable"


class Systemctl:
    """The command source: one answer for `systemctl is-active`, each call kept with its
    timeout (a GB200-class tray must not ask at all)."""

    def __init__(self, result: Optional[CommandResult] = None) -> None:
        self.result = result or CommandResult(ARGV, 0, "active\n")
        self.calls: List[Tuple[Tuple[str, ...], Any]] = []

    def run(self, argv: Sequence[str], timeout: float) -> CommandResult:
        self.calls.append((tuple(argv), timeout))
        return self.result


def run(gpus: List[Dict[str, Any]], pci: Optional[List[Dict[str, Any]]],
        service: Optional[Systemctl] = None, overrides: Optional[Dict[str, Any]] = None
        ) -> Outcome:
    facts = {} if pci is None else {"pci_devices": copy.deepcopy(pci)}
    host = Host("/nonexistent-root", commands=service or Systemctl(),
                gpus=StaticGpus({"gpus": copy.deepcopy(gpus)}), facts=StaticFacts(facts))
    policy = ResolvedPolicy(load_policy(1, overrides), "dra", settings=Config().model_dump())
    return FABRIC_MANAGER.run(host, policy)


def gpu(index: int, fabric: Any = COMPLETED, **more: Any) -> Dict[str, Any]:
    return dict({"index": index, "pci_bus_id": (BUS0, BUS1)[index], "fabric": fabric}, **more)


def no_call(index: int) -> Dict[str, Any]:
    return gpu(index, None, errors={"fabric": dict(NO_CALL)})


def two_completed() -> List[Dict[str, Any]]:
    return [gpu(0), gpu(1)]


def per_gpu(**more: Any) -> Dict[str, Any]:
    return dict({"per_gpu": {0: COMPLETED, 1: COMPLETED}, "lost_gpus": [],
                 "unsupported_gpus": []}, **more)


# -- HGX: NVSwitch on PCI, the host's own fabric manager must run ----------------------------
def test_hgx_with_the_service_active_and_every_gpu_completed_passes():
    src = Systemctl()
    got = run(two_completed(), [GPU_FN, NVSWITCH, dict(NVSWITCH, slot="0000:06:00.0")], src)
    assert got == Outcome(
        Status.PASS, "nvidia-fabricmanager active; 2 GPU(s) fabric state completed/success",
        per_gpu(nvswitches_on_pci=2, service="active"))


def test_the_service_is_asked_once_bounded_at_ten_seconds():
    src = Systemctl()
    run(two_completed(), [NVSWITCH], src)
    assert src.calls == [(ARGV, 10)]


@pytest.mark.parametrize("result, why", [
    (CommandResult(ARGV, -1, "", "", timed_out=True),
     "`systemctl is-active nvidia-fabricmanager` timed out"),
    (CommandResult(ARGV, 127, "", "systemctl: command not found"), "`systemctl` not installed"),
])
def test_a_service_state_that_cannot_be_read_is_unknown(result, why):
    got = run(two_completed(), [NVSWITCH], Systemctl(result))
    assert got == Outcome(
        Status.UNKNOWN, f"cannot read fabric state: nvidia-fabricmanager service state: {why}",
        per_gpu(nvswitches_on_pci=1, service=None), code="service-state-unknown")


def test_exit_status_0_with_another_state_word_is_not_active():
    # Both must say active: the exit status (systemctl(1): 0 = active) and the state printed.
    got = run(two_completed(), [NVSWITCH], Systemctl(CommandResult(ARGV, 0, "inactive\n")))
    assert got == Outcome(
        Status.FAIL, "nvidia-fabricmanager is inactive on an NVSwitch system",
        per_gpu(nvswitches_on_pci=1, service="inactive"), code="service-inactive")


def test_a_failed_answer_without_a_state_word_is_named_not_active():
    got = run(two_completed(), [NVSWITCH], Systemctl(CommandResult(ARGV, 3, "")))
    assert got == Outcome(
        Status.FAIL, "nvidia-fabricmanager is not active on an NVSwitch system",
        per_gpu(nvswitches_on_pci=1, service=None), code="service-inactive")


def test_a_pci_class_without_its_leading_zero_is_still_an_nvswitch():
    # The kernel's PCI uevent prints PCI_CLASS with %04X (drivers/pci/pci-driver.c
    # pci_uevent), so udev reports class 0x068000 as "68000".
    got = run(two_completed(), [GPU_FN, dict(NVSWITCH, **{"class": "68000"})])
    assert got == Outcome(
        Status.PASS, "nvidia-fabricmanager active; 2 GPU(s) fabric state completed/success",
        per_gpu(nvswitches_on_pci=1, service="active"))


def test_the_policy_pci_classes_decide_what_is_an_nvswitch():
    # A site policy listing no NVSwitch class: the NVSwitch function does not count, the GPUs'
    # fabric state alone is the verdict and the service is not asked.
    src = Systemctl()
    got = run(two_completed(), [NVSWITCH], src,
              overrides={"gpu": {"fabric": {"nvswitch_pci_classes": []}}})
    assert (got.status, got.details["nvswitches_on_pci"], got.details["service"]) == (
        Status.PASS, 0, None)
    assert src.calls == []


# -- GB200-class tray: fabric state on NVML, no NVSwitch on PCI ------------------------------
def test_a_tray_with_every_gpu_completed_passes_without_asking_the_service():
    src = Systemctl()
    got = run(two_completed(), [GPU_FN], src)
    assert got == Outcome(
        Status.PASS, "2 GPU(s) fabric state completed/success (no NVSwitch on PCI: the fabric "
        "is managed outside this host)", per_gpu(nvswitches_on_pci=0, service=None))
    assert src.calls == []


def test_a_tray_with_one_gpu_unreadable_is_unknown_naming_it():
    err = {"kind": "unknown", "message": "Unknown Error", "nvml_code": 999}
    got = run([gpu(0), gpu(1, None, errors={"fabric": err})], [GPU_FN])
    assert got == Outcome(
        Status.UNKNOWN, f"cannot read fabric state: GPU 1 ({BUS1}) fabric: unknown (Unknown Error)",
        {"nvswitches_on_pci": 0, "service": None, "per_gpu": {0: COMPLETED}, "lost_gpus": [],
         "unsupported_gpus": []}, code="field-unreadable")


@pytest.mark.parametrize("fabric, words", [
    ({"state": None, "status": "success"}, "fabric state unknown, status success"),
    ({"state": "completed", "status": None}, "fabric state completed, status unknown"),
])
def test_a_missing_state_or_status_is_named_unknown_and_fails(fabric, words):
    got = run([gpu(0, fabric)], [GPU_FN])
    # The finding names GPU 0, so gpus_at_fault does too (checks/gpu/common.py gpu_ref: the
    # snapshot entry's index and pci_bus_id).
    assert got == Outcome(
        Status.FAIL, f"GPU 0 ({BUS0}) {words}",
        {"nvswitches_on_pci": 0, "service": None, "per_gpu": {0: fabric}, "lost_gpus": [],
         "unsupported_gpus": [], "gpus_at_fault": [{"index": 0, "pci_bus_id": BUS0}]},
        code="fabric-not-completed")


def test_a_malformed_status_is_unknown_naming_the_field_and_the_next_gpu_is_judged():
    got = run([gpu(0, {"state": "completed", "status": 0}), gpu(1)], [GPU_FN])
    assert got == Outcome(
        Status.UNKNOWN, "cannot read fabric state: malformed snapshot: field "
        "gpus[0].fabric.status is an integer, expected a string",
        {"nvswitches_on_pci": 0, "service": None, "per_gpu": {1: COMPLETED}, "lost_gpus": [],
         "unsupported_gpus": []}, code="snapshot-malformed")


# -- not an NVSwitch system -------------------------------------------------------------------
def test_every_gpu_not_supported_and_no_nvswitch_is_a_skip():
    # No `errors` object at all: every field was read (docs/gpu-snapshot.md).
    fabric = {"state": "not_supported", "status": None}
    got = run([gpu(0, fabric), gpu(1, fabric)], [GPU_FN])
    assert got == Outcome(
        Status.SKIP, "not an NVSwitch system (no GPU reports a fabric state, no NVSwitch on PCI)",
        {}, skip=NA)


def test_no_fabric_call_and_no_nvswitch_is_not_applicable_naming_the_gpus():
    got = run([no_call(0), no_call(1)], [GPU_FN])
    assert got == Outcome(
        Status.SKIP, "not an NVSwitch system (no NVSwitch on PCI; NVML has no fabric call on "
        "this driver, function_not_found, on GPU 0, 1)",
        {"nvswitches_on_pci": 0, "gpus_without_fabric_call": [0, 1]}, skip=NA)


def test_a_lost_first_gpu_leaves_the_next_one_counted():
    lost = {"index": 0, "error": {"kind": "gpu_is_lost", "message": "GPU is lost"}}
    got = run([lost, no_call(1)], [GPU_FN])
    assert got == Outcome(
        Status.SKIP, "not an NVSwitch system (no NVSwitch on PCI; NVML has no fabric call on "
        "this driver, function_not_found, on GPU 1)",
        {"nvswitches_on_pci": 0, "gpus_without_fabric_call": [1]}, skip=NA)


def test_a_gpu_whose_fabric_was_read_is_not_counted_as_lacking_the_call():
    # errors[<field>] is for a field that is null (docs/gpu-snapshot.md); GPU 0's fabric was
    # read (not_supported), so a stray errors entry on it says nothing about the call.
    read = gpu(0, {"state": "not_supported", "status": None}, errors={"fabric": dict(NO_CALL)})
    got = run([read, no_call(1)], [GPU_FN])
    assert got == Outcome(
        Status.SKIP, "not an NVSwitch system (no NVSwitch on PCI; NVML has no fabric call on "
        "this driver, function_not_found, on GPU 1)",
        {"nvswitches_on_pci": 0, "gpus_without_fabric_call": [1]}, skip=NA)


def test_a_gpu_missing_the_field_without_an_error_keeps_the_host_unknown():
    # GPU 1's fabric is null with no errors entry: nothing says the call is missing there, so
    # the missing call on GPU 0 does not make the host not applicable.
    got = run([no_call(0), gpu(1, None)], [GPU_FN])
    assert got == Outcome(
        Status.UNKNOWN, f"cannot read fabric state: GPU 0 ({BUS0}) fabric: function_not_found "
        f"(Function Not Found); GPU 1 ({BUS1}) fabric: missing",
        {"per_gpu": {}, "lost_gpus": [], "unsupported_gpus": []}, code="field-unreadable")


# -- which GPUs a fabric-not-completed verdict names (details["gpus_at_fault"]) ---------------
# agent/gpu_health.py counts a GPU unhealthy when a closing verdict names it there; Findings
# (checks/gpu/common.py) names GPUs only when every finding of the reported status names one.
IN_PROGRESS = {"state": "in_progress", "status": "success", "status_code": 0, "clique_id": 0}
U0, U1 = "GPU-00000000-0000-4000-8000-000000000000", "GPU-00000000-0000-4000-8000-000000000001"


def test_a_tray_names_only_the_gpu_that_has_not_joined():
    got = run([gpu(0, uuid=U0), gpu(1, IN_PROGRESS, uuid=U1)], [GPU_FN])
    assert (got.status, got.code) == (Status.FAIL, "fabric-not-completed")
    assert got.summary == f"GPU 1 ({BUS1}) fabric state in_progress, status success"
    assert got.details["gpus_at_fault"] == [{"index": 1, "uuid": U1, "pci_bus_id": BUS1}]


def test_hgx_with_the_service_active_names_every_gpu_not_completed_in_order():
    error = {"state": "completed", "status": "error", "status_code": 1, "clique_id": 0}
    got = run([gpu(0, IN_PROGRESS), gpu(1, error)], [NVSWITCH])
    assert (got.status, got.code) == (Status.FAIL, "fabric-not-completed")
    assert got.summary == (f"GPU 0 ({BUS0}) fabric state in_progress, status success; "
                           f"GPU 1 ({BUS1}) fabric state completed, status error")
    assert got.details["gpus_at_fault"] == [{"index": 0, "pci_bus_id": BUS0},
                                            {"index": 1, "pci_bus_id": BUS1}]


def test_an_inactive_service_is_not_the_gpus_fault_so_none_is_named():
    # The first failure (service-inactive) names no GPU: the verdict is not wholly the
    # GPUs', so no GPU is marked unhealthy for it (docs/decisions.md "Per-GPU health").
    got = run([gpu(0), gpu(1, IN_PROGRESS)], [NVSWITCH],
              Systemctl(CommandResult(ARGV, 3, "inactive\n")))
    assert (got.status, got.code) == (Status.FAIL, "service-inactive")
    assert f"GPU 1 ({BUS1}) fabric state in_progress" in got.summary
    assert "gpus_at_fault" not in got.details


def test_every_gpu_completed_names_none():
    got = run([gpu(0, uuid=U0), gpu(1, uuid=U1)], [GPU_FN])
    assert got.status == Status.PASS and "gpus_at_fault" not in got.details
