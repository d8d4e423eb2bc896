"""checks/gpu/gpu_count.py: which GPUs a gpu-count failure names in details["gpus_at_fault"]
(agent/gpu_health.py counts them unhealthy): each lost GPU, and each PCI slot NVML does not
count, only when they explain the failure whole.

Expected values are written by hand from the PCI bus id forms the check compares (NVML's
"00000000:1A:00.0" and udev's "0000:1a:00.0": domain:bus:device.function, the last 12
characters, lowercase) and docs/gpu-snapshot.md (a lost GPU is an entry with an `error`
object; device_count is NVML's count).
"""
from typing import Any, Dict, List, Optional

from agent.model import Outcome, Status
from checks.gpu.gpu_count import GPU_COUNT
from tests.checks.snapshot_support import on_snapshot

BUS = ["00000000:1A:00.0", "00000000:2B:00.0", "00000000:3C:00.0", "00000000:4D:00.0"]
SLOT = ["0000:1a:00.0", "0000:2b:00.0", "0000:3c:00.0", "0000:4d:00.0"]
LOST = {"kind": "gpu_lost", "message": "GPU is lost"}


def run(gpus: List[Dict[str, Any]], slots: Optional[List[str]] = None,
        device_count: Optional[int] = None, **settings: Any) -> Outcome:
    snap: Dict[str, Any] = {"gpus": gpus}
    if device_count is not None:
        snap["device_count"] = device_count
    facts = {} if slots is None else {
        "pci_devices": [{"slot": s, "vendor": "10de", "class": "030200"} for s in slots]}
    return on_snapshot(GPU_COUNT, snap, facts, **settings)


def test_a_lost_gpu_without_a_pci_inventory_is_named_at_fault():
    got = run([{"index": 0, "pci_bus_id": BUS[0]},
               {"index": 1, "pci_bus_id": BUS[1], "error": LOST}])
    assert (got.status, got.code) == (Status.FAIL, "gpu-not-usable")
    assert got.details["gpus_at_fault"] == [{"index": 1, "pci_bus_id": BUS[1]}]


def test_a_lost_gpu_and_a_slot_nvml_does_not_list_are_both_named():
    # PCI: four GPUs; NVML lists three, GPU 2 lost; slot 4d is on PCI but not in NVML
    gpus = [{"index": 0, "pci_bus_id": BUS[0]}, {"index": 1, "pci_bus_id": BUS[1]},
            {"index": 2, "pci_bus_id": BUS[2], "error": LOST}]
    got = run(gpus, SLOT)
    assert (got.status, got.code) == (Status.FAIL, "gpu-not-usable")
    assert got.details["gpus_at_fault"] == [{"index": 2, "pci_bus_id": BUS[2]},
                                            {"pci_bus_id": SLOT[3]}]
    assert got.details["pci_not_in_nvml"] == [SLOT[2], SLOT[3]]
    assert got.summary == ("GPU 2 (00000000:3C:00.0) not usable: gpu_lost (GPU is lost); 4 "
                           "NVIDIA GPU(s) on PCI but NVML sees 3 (not in NVML: 0000:3c:00.0, "
                           "0000:4d:00.0)")


def test_a_pci_slot_written_with_an_eight_digit_domain_matches_the_lost_gpu():
    slots = ["00000000:1a:00.0", SLOT[1], "00000000:3c:00.0", SLOT[3]]
    gpus = [{"index": 0, "pci_bus_id": BUS[0]}, {"index": 1, "pci_bus_id": BUS[1]},
            {"index": 2, "pci_bus_id": BUS[2], "error": LOST}]
    got = run(gpus, slots)
    assert got.details["gpus_at_fault"] == [{"index": 2, "pci_bus_id": BUS[2]},
                                            {"pci_bus_id": SLOT[3]}]
    assert got.details["pci_not_in_nvml"] == ["00000000:3c:00.0", SLOT[3]]


def test_a_lost_gpu_without_its_slot_leaves_the_missing_slots_unattributed():
    # NVML counts one GPU but lists a usable one and a lost one without a bus id: PCI slot
    # 2b is missing from NVML, and nothing says whether it is the lost GPU's
    gpus = [{"index": 0, "pci_bus_id": BUS[0]}, {"index": 1, "error": LOST}]
    got = run(gpus, SLOT[:2], device_count=1)
    assert (got.status, got.code) == (Status.FAIL, "gpu-not-usable")
    assert "gpus_at_fault" not in got.details


def test_the_named_gpus_stand_when_they_also_explain_expected_gpus():
    # expected 4 = NVML's 3 + the one slot NVML does not list
    gpus = [{"index": 0, "pci_bus_id": BUS[0]}, {"index": 1, "pci_bus_id": BUS[1]},
            {"index": 2, "pci_bus_id": BUS[2], "error": LOST}]
    got = run(gpus, SLOT, expected_gpus=4)
    assert got.details["gpus_at_fault"] == [{"index": 2, "pci_bus_id": BUS[2]},
                                            {"pci_bus_id": SLOT[3]}]
    # expected 5: something else is missing too, so the named GPUs do not explain it
    assert "gpus_at_fault" not in run(gpus, SLOT, expected_gpus=5).details


def test_a_lost_gpu_whose_slot_is_not_on_pci_leaves_the_missing_slots_unattributed():
    # PCI: 1a, 2b, 4d; NVML counts two: 1a usable and a lost GPU at 3c (not on PCI)
    gpus = [{"index": 0, "pci_bus_id": BUS[0]},
            {"index": 1, "pci_bus_id": BUS[2], "error": LOST}]
    got = run(gpus, [SLOT[0], SLOT[1], SLOT[3]], device_count=2)
    assert (got.status, got.code) == (Status.FAIL, "gpu-not-usable")
    assert "gpus_at_fault" not in got.details
