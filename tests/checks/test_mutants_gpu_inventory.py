"""checks/gpu/{gpu_count,driver_persistence,mig_mode}.py, outcome by outcome: the whole
Outcome of gpu-count (PCI against
NVML against expected_gpus, lost GPUs), driver-persistence and mig-mode for every branch.

Expected values are written by hand from docs/gpu-snapshot.md (device_count, per-GPU error
objects, "not_supported" fields), the PCI bus id forms (NVML "00000000:1A:00.0", udev
"0000:1a:00.0"), NVIDIA's persistence-daemon documentation and the MIG strategies of the GPU
Operator / device plugin (none: MIG disabled everywhere; single: enabled everywhere; mixed).
"""
from typing import Any, Dict, List, Optional

import pytest

from agent.model import Outcome, Status
from checks.gpu.driver_persistence import DRIVER_PERSISTENCE
from checks.gpu.gpu_count import GPU_COUNT
from checks.gpu.mig_mode import MIG_MODE
from tests.checks.snapshot_support import on_snapshot

COUNT_FIX = ("A GPU on PCI that NVML cannot use has usually fallen off the bus (XID 79) or "
             "failed to initialise: check `dmesg`, drain the node, reseat or replace the GPU "
             "and reboot. If the count is right, correct expected_gpus in the config.")
PERSIST_FIX = ("Enable the NVIDIA persistence daemon: `systemctl enable --now "
               "nvidia-persistenced` (NVIDIA Driver Persistence docs); without it every "
               "NVML/CUDA client re-initialises the GPUs, which takes seconds per GPU.")
MIG_FIX = ("Apply the MIG mode the strategy needs (`nvidia-smi -i N -mig 0|1`), then reset the "
           "GPU (`nvidia-smi -r -i N` with no GPU clients; docs/runbook-nvml.md) or reboot so "
           "pending equals current; or change gpu.mig_strategy in the config.")
BUS = ["00000000:1A:00.0", "00000000:2B:00.0", "00000000:3C:00.0"]
SLOT = ["0000:1a:00.0", "0000:2b:00.0", "0000:3c:00.0"]


def nv(i: int, **fields: Any) -> Dict[str, Any]:
    return {"index": i, "pci_bus_id": BUS[i], **fields}


def pci(*indexes: int) -> List[Dict[str, Any]]:
    return [{"slot": SLOT[i], "vendor": "10de", "class": "030200"} for i in indexes] + [
        {"slot": "0000:05:00.0", "vendor": "8086", "class": "020000"}]  # a NIC: not counted


def run(check, gpus, device_count: Optional[int] = None, pci_devices: Any = None,
        **settings: Any) -> Outcome:
    snap: Dict[str, Any] = {"gpus": gpus}
    if device_count is not None:
        snap["device_count"] = device_count
    facts = {"pci_devices": pci_devices} if pci_devices is not None else {}
    return on_snapshot(check, snap, facts, **settings)


def count_details(nvml, usable, pci_n, expected=None, lost=(), **more):
    return {"nvml": nvml, "usable": usable, "pci": pci_n, "expected": expected,
            "lost": list(lost), **more}


def fix_of(check, code: str) -> str:
    """The declared fix the engine puts in the result where the outcome has no own
    remediation (these checks' outcomes never carry one)."""
    return check.failure(code).fix


LOST = {"kind": "gpu_lost", "message": "GPU is lost"}


# -- gpu-count ---------------------------------------------------------------------------
def test_count_matches_pci_in_either_bus_id_form():
    out = run(GPU_COUNT, [nv(0), nv(1)], 2, pci(1, 0))
    assert out == Outcome(Status.PASS, "2 GPU(s) on PCI and in NVML",
                          count_details(2, 2, 2))
    out = run(GPU_COUNT, [nv(0), nv(1)], 2, pci(0, 1), expected_gpus=2)
    assert out == Outcome(Status.PASS, "2 GPU(s) on PCI and in NVML, as expected (2)",
                          count_details(2, 2, 2, 2))


def test_count_without_pci_warns_unless_the_count_is_pinned():
    out = run(GPU_COUNT, [nv(0), nv(1)])
    assert out == Outcome(
        Status.WARN,
        "NVML sees 2 GPU(s); PCI inventory not available to cross-check (set expected_gpus to "
        "pin the count)", count_details(2, 2, None), code="pci-unavailable")
    assert fix_of(GPU_COUNT, "pci-unavailable") == (
        "Set expected_gpus in the config to pin the GPU count.")
    out = run(GPU_COUNT, [nv(0), nv(1)], expected_gpus=2)
    assert out == Outcome(Status.PASS, "NVML sees 2 GPU(s), as expected (2)",
                          count_details(2, 2, None, 2))


def test_count_uses_device_count_over_the_list():
    out = run(GPU_COUNT, [nv(0), nv(1)], 3, pci(0, 1, 2))
    assert out == Outcome(Status.PASS, "3 GPU(s) on PCI and in NVML", count_details(3, 3, 3))


def test_lost_gpu_names_its_unreadable_pci_slot():
    gpus = [nv(0), {"index": 1, "pci_bus_id": BUS[1], "error": LOST}]
    out = run(GPU_COUNT, gpus, 2, pci(0, 1))
    assert out == Outcome(
        Status.FAIL,
        f"GPU 1 ({BUS[1]}) not usable: gpu_lost (GPU is lost); PCI {SLOT[1]} unreadable in NVML",
        count_details(2, 1, 2, lost=[1], gpus_at_fault=[{"index": 1, "pci_bus_id": BUS[1]}]),
        code="gpu-not-usable")
    assert fix_of(GPU_COUNT, "gpu-not-usable") == COUNT_FIX


def test_lost_gpus_without_a_pci_match_and_a_wrong_expectation():
    gpus = [{"index": 0, "error": LOST}, {"index": 1, "error": {"kind": "timeout"}}, nv(2)]
    out = run(GPU_COUNT, gpus, 3, pci(0, 1, 2), expected_gpus=3)
    assert out == Outcome(
        Status.FAIL,
        "GPU 0 not usable: gpu_lost (GPU is lost); GPU 1 not usable: timeout (<null>); "
        f"PCI {SLOT[0]}, {SLOT[1]} unreadable in NVML; 1 usable GPU(s), config expects 3",
        count_details(3, 1, 3, 3, [0, 1], gpus_at_fault=[{"index": 0}, {"index": 1}]),
        code="gpu-not-usable")  # the first problem's
    # Two lost, one slot missing: the slots cannot be paired with the lost GPUs.
    out = run(GPU_COUNT, gpus, 3, pci(1, 2))
    assert out.summary == ("GPU 0 not usable: gpu_lost (GPU is lost); GPU 1 not usable: timeout "
                           "(<null>); 2 NVIDIA GPU(s) on PCI but NVML sees 3 (not in NVML: "
                           f"{SLOT[1]})")
    out = run(GPU_COUNT, gpus[:1], 1)
    assert out.summary == "GPU 0 not usable: gpu_lost (GPU is lost)"


def test_pci_sees_more_gpus_than_nvml():
    out = run(GPU_COUNT, [nv(0), nv(1)], 2, pci(0, 1, 2))
    assert out == Outcome(
        Status.FAIL, f"3 NVIDIA GPU(s) on PCI but NVML sees 2 (not in NVML: {SLOT[2]})",
        count_details(2, 2, 3, pci_not_in_nvml=[SLOT[2]], gpus_at_fault=[{"pci_bus_id": SLOT[2]}]),
        code="pci-nvml-mismatch")
    assert fix_of(GPU_COUNT, "pci-nvml-mismatch") == COUNT_FIX
    out = run(GPU_COUNT, [], 0, pci(2))
    assert out == Outcome(Status.FAIL, "1 NVIDIA GPU(s) on PCI but NVML sees 0",
                          count_details(0, 0, 1, pci_not_in_nvml=[SLOT[2]],
                                        gpus_at_fault=[{"pci_bus_id": SLOT[2]}]),
                          code="pci-nvml-mismatch")


def test_nvml_sees_more_gpus_than_pci():
    out = run(GPU_COUNT, [nv(0), nv(1)], 2, pci(0))
    assert out == Outcome(Status.FAIL, "1 NVIDIA GPU(s) on PCI but NVML sees 2",
                          count_details(2, 2, 1, pci_not_in_nvml=[]), code="pci-nvml-mismatch")


def test_expected_count_differs():
    out = run(GPU_COUNT, [nv(0), nv(1)], 2, expected_gpus=4)
    assert out == Outcome(Status.FAIL, "2 usable GPU(s), config expects 4",
                          count_details(2, 2, None, 4), code="count-not-expected")
    assert fix_of(GPU_COUNT, "count-not-expected") == COUNT_FIX


@pytest.mark.parametrize("pci_devices, pci_n", [([], 0), (None, None)])
def test_no_gpu_at_all_fails(pci_devices, pci_n):
    out = run(GPU_COUNT, [], pci_devices=pci_devices)
    assert out == Outcome(Status.FAIL, "no NVIDIA GPU: NVML sees 0 and none on PCI",
                          count_details(0, 0, pci_n), code="no-gpu")
    assert fix_of(GPU_COUNT, "no-gpu") == (
        "Find the missing GPU (dmesg, XID 79), drain, reseat or replace it, reboot.")


# -- driver-persistence ------------------------------------------------------------------
def per(per_gpu=None, lost=(), unsupported=(), **more):
    return {**more, "per_gpu": per_gpu or {}, "lost_gpus": list(lost),
            "unsupported_gpus": list(unsupported)}


def test_persistence_on_everywhere_passes():
    out = run(DRIVER_PERSISTENCE, [nv(0, persistence_mode=True), nv(1, persistence_mode=True)])
    assert out == Outcome(Status.PASS, "persistence mode on for 2 GPU(s)", per())


def test_persistence_off_names_each_gpu():
    gpus = [nv(0, persistence_mode=False), nv(1, persistence_mode=True),
            {"index": 2, "persistence_mode": False}]
    assert run(DRIVER_PERSISTENCE, gpus) == Outcome(
        Status.FAIL, f"persistence mode off on GPU 0 ({BUS[0]}), GPU 2", per(),
        code="persistence-off")
    assert fix_of(DRIVER_PERSISTENCE, "persistence-off") == PERSIST_FIX


def test_persistence_not_a_boolean_is_unknown():
    out = run(DRIVER_PERSISTENCE, [nv(0, persistence_mode="Enabled")])
    assert out == Outcome(
        Status.UNKNOWN,
        "cannot read persistence mode: malformed snapshot: field gpus[0].persistence_mode is a "
        "string, expected a boolean", per(), code="snapshot-malformed")


# -- mig-mode ------------------------------------------------------------------------------
def mig(current: Any, pending: Any = "same") -> Dict[str, Any]:
    return {"current": current, "pending": current if pending == "same" else pending}


def mig_run(gpus, strategy: str = "none") -> Outcome:
    return run(MIG_MODE, gpus, gpu={"mig_strategy": strategy})


def test_mig_disabled_everywhere_with_strategy_none_passes():
    a, b = mig("disabled"), mig("disabled")
    assert mig_run([nv(0, mig=a), nv(1, mig=b)]) == Outcome(
        Status.PASS, "MIG current == pending on 2 GPU(s), consistent with strategy none",
        per({0: a, 1: b}, strategy="none", mig_enabled_gpus=[]))


def test_mig_pending_change_fails_before_the_strategy_is_judged():
    a, b = mig("disabled", "enabled"), mig("enabled", None)
    assert mig_run([nv(0, mig=a), nv(1, mig=b)], "single") == Outcome(
        Status.FAIL,
        f"GPU 0 ({BUS[0]}) MIG enabled is pending (current disabled): takes effect at the next "
        f"GPU reset; GPU 1 ({BUS[1]}) MIG unknown is pending (current enabled): takes effect "
        "at the next GPU reset",
        per({0: a, 1: b}, strategy="single", mig_enabled_gpus=[],
            gpus_at_fault=[{"index": 0, "pci_bus_id": BUS[0]}, {"index": 1, "pci_bus_id": BUS[1]}]),
        code="mig-change-pending")
    assert fix_of(MIG_MODE, "mig-change-pending") == MIG_FIX


def test_mig_enabled_with_strategy_none_fails():
    a, b = mig("disabled"), mig("enabled")
    assert mig_run([nv(0, mig=a), nv(1, mig=b)], "none") == Outcome(
        Status.FAIL, f"GPU 1 ({BUS[1]}) has MIG enabled but the MIG strategy is none",
        per({0: a, 1: b}, strategy="none", mig_enabled_gpus=[1],
            gpus_at_fault=[{"index": 1, "pci_bus_id": BUS[1]}]), code="mig-strategy-mismatch")
    assert fix_of(MIG_MODE, "mig-strategy-mismatch") == MIG_FIX


def test_mig_strategy_single_needs_every_gpu_enabled_and_capable():
    a, b = mig("enabled"), mig(None)
    gpus = [nv(0, mig=a), nv(1, mig=b),
            {"index": 2, "errors": {"mig": {"kind": "not_supported"}}},
            {"index": 3, "errors": {"mig": {"kind": "not_supported"}}}]
    assert mig_run(gpus, "single") == Outcome(
        Status.FAIL,
        f"GPU 1 ({BUS[1]}) has MIG disabled but the MIG strategy is single; GPU 2, 3 cannot "
        "run MIG (strategy single)",
        per({0: a, 1: b}, unsupported=[2, 3], strategy="single", mig_enabled_gpus=[0]),
        code="mig-strategy-mismatch")
    assert mig_run(gpus[:1], "single").status == Status.PASS


def test_mig_strategy_mixed_accepts_both_and_unsupported_gpus():
    a, b = mig("enabled"), mig("disabled")
    gpus = [nv(0, mig=a), nv(1, mig=b), {"index": 2, "errors": {"mig": {"kind": "not_supported"}}}]
    assert mig_run(gpus, "mixed") == Outcome(
        Status.PASS,
        "MIG current == pending on 2 GPU(s), consistent with strategy mixed (1 GPU(s) without "
        "MIG mode)",
        per({0: a, 1: b}, unsupported=[2], strategy="mixed", mig_enabled_gpus=[0]))


@pytest.mark.parametrize("key", ["current", "pending"])
def test_mig_malformed_field_is_unknown(key):
    bad = mig("disabled")
    bad[key] = 1
    assert mig_run([nv(0, mig=bad)]) == Outcome(
        Status.UNKNOWN,
        f"cannot read MIG mode: malformed snapshot: field gpus[0].mig.{key} is an integer, "
        "expected a string", per(strategy="none", mig_enabled_gpus=[]),
        code="snapshot-malformed")


def test_mig_a_pending_or_malformed_gpu_does_not_stop_the_next_one():
    gpus = [nv(0, mig=mig("disabled", "enabled")), nv(1, mig=mig("enabled"))]
    out = mig_run(gpus, "none")
    assert out.summary.endswith(f"GPU 1 ({BUS[1]}) has MIG enabled but the MIG strategy is none")
    bad = mig("disabled")
    bad["current"] = 1
    out = mig_run([nv(0, mig=bad), nv(1, mig=mig("enabled"))], "none")
    assert (out.status, out.summary) == (
        Status.FAIL, f"GPU 1 ({BUS[1]}) has MIG enabled but the MIG strategy is none")


def test_lost_gpu_error_message_is_cut_at_200_characters():
    gpus = [{"index": 0, "error": {"kind": "gpu_lost", "message": "m" * 250}}]
    out = run(GPU_COUNT, gpus, 1)
    assert out.summary == "GPU 0 not usable: gpu_lost (" + "m" * 200 + ")"
