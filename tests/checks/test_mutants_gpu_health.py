"""checks/gpu/{gpu_ecc,gpu_row_remap,gpu_thermal}.py, outcome by outcome: the whole Outcome
of gpu-ecc, gpu-row-remap and
gpu-thermal for each threshold, its boundary and each malformed field, so a changed bound,
word or field name is caught.

Expected values are written by hand from the `gpu` section of checks/policy_v1.yaml and the
sources it cites (NVIDIA "GPU Memory Error Management": volatile uncorrectable errors fail,
aggregate ones warn, a pending row remap needs a reset, a remap failure is an RMA; nvidia-smi
"GPU Slowdown Temp"; nvml.h clock-event reasons) and the snapshot layout in
docs/gpu-snapshot.md.
"""
import copy
from typing import Any, Dict, Optional

import pytest

from agent.config import Config
from agent.host.seam import Host, StaticFacts, StaticGpus
from agent.model import Outcome, Status
from checks.gpu.gpu_ecc import GPU_ECC
from checks.gpu.gpu_row_remap import GPU_ROW_REMAP
from checks.gpu.gpu_thermal import GPU_THERMAL
from checks.gpu.readers import kind_of
from checks.policy import ResolvedPolicy, load_policy

PCI0 = "00000000:18:00.0"
DRAIN_RESET = ("Drain the node, then reset the GPU (`nvidia-smi -r -i N` with no GPU clients; "
               "docs/runbook-nvml.md) or reboot")
ECC_FIX = (DRAIN_RESET + "; volatile counters clear with the reset. Repeated uncorrectable "
           "errors on one GPU: check gpu-row-remap and open an RMA with NVIDIA.")
ECC_WARN_FIX = ("Review the GPU's error history (`nvidia-smi -q -d ECC,ROW_REMAPPER`); enable "
                "ECC (`nvidia-smi -e 1`, then reboot) on data center GPUs.")
REMAP_FIX = ("A remapping failure means the GPU ran out of spare rows: drain the node and open "
             "an RMA with NVIDIA (GPU Memory Error Management, \"Row Remapping\").")
REMAP_WARN_FIX = DRAIN_RESET + " so the pending remap takes effect."
THERMAL_FIX = ("Check cooling and power: airflow or liquid loop, inlet temperature, PSU and "
               "power brake signals (`nvidia-smi -q -d PERFORMANCE,TEMPERATURE`); HW power "
               "brake is an external signal from the chassis.")


def ecc(vol_unc: Any = 0, agg_unc: Any = 0, agg_cor: Any = 0, mode: Any = True,
        pending: Any = True) -> Dict[str, Any]:
    return {"mode_current": mode, "mode_pending": pending,
            "volatile": {"uncorrected": vol_unc, "corrected": 0},
            "aggregate": {"uncorrected": agg_unc, "corrected": agg_cor}}


def gpu(index: int, bus: Optional[str] = None, **fields: Any) -> Dict[str, Any]:
    g: Dict[str, Any] = {"index": index}
    if bus:
        g["pci_bus_id"] = bus
    g.update(fields)
    return g


def run(check, gpus, tmp_path=None, sticky: Any = None, boot: Optional[str] = None,
        **gpu_policy: Any) -> Outcome:
    root = tmp_path if tmp_path is not None else "/nonexistent-root"
    if tmp_path is not None and boot is not None:
        (tmp_path / "proc/sys/kernel/random").mkdir(parents=True, exist_ok=True)
        (tmp_path / "proc/sys/kernel/random/boot_id").write_text(boot + "\n")
    snap = None if gpus is None else {"gpus": copy.deepcopy(gpus)}
    host = Host(root, gpus=StaticGpus(snap),
                facts=StaticFacts({"sticky": sticky} if sticky is not None else {}))
    pol = load_policy(1, {"gpu": gpu_policy} if gpu_policy else None)
    return check.run(host, ResolvedPolicy(pol, "dra", settings=Config().model_dump()))


def det(per_gpu, lost=(), unsupported=(), at_fault=()):
    # at_fault: the GPUs every finding of the reported status names (details["gpus_at_fault"],
    # which agent/gpu_health.py counts unhealthy), as the snapshot entry gives them.
    out = {"per_gpu": per_gpu, "lost_gpus": list(lost), "unsupported_gpus": list(unsupported)}
    if at_fault:
        out["gpus_at_fault"] = list(at_fault)
    return out


def fix_of(check, code: str) -> str:
    """The declared fix the engine puts in the result where the outcome has no own
    remediation (the GPU checks' outcomes never carry one)."""
    return check.failure(code).fix


def ecc_per(e):
    return {"volatile": e["volatile"], "aggregate": e["aggregate"], "mode": e["mode_current"]}


@pytest.mark.parametrize("check", [GPU_ECC, GPU_ROW_REMAP, GPU_THERMAL])
def test_no_snapshot_is_unknown(check):
    # Kept name: the missing snapshot is now nvml-responsive's own unknown (snapshot-missing);
    # the GPU checks skip naming it.
    assert run(check, None) == Outcome(
        Status.SKIP, "needs nvml-responsive (no GPU snapshot for this host: no gpus.json)",
        skip="needs:nvml-responsive")


# -- gpu-ecc ------------------------------------------------------------------------------
def test_ecc_clean_gpus_pass():
    a, b = ecc(), ecc(agg_cor=12)
    assert run(GPU_ECC, [gpu(0, PCI0, ecc=a), gpu(1, ecc=b)]) == Outcome(
        Status.PASS, "no uncorrectable ECC errors on 2 GPU(s)",
        det({0: ecc_per(a), 1: ecc_per(b)}))


def test_ecc_volatile_uncorrectable_fails_and_hides_the_warnings():
    a, b = ecc(vol_unc=1, agg_unc=1), ecc(mode=False, pending=False)
    assert run(GPU_ECC, [gpu(0, PCI0, ecc=a), gpu(1, ecc=b)]) == Outcome(
        Status.FAIL, f"GPU 0 ({PCI0}) 1 volatile uncorrectable ECC error(s)",
        det({0: ecc_per(a), 1: ecc_per(b)}, at_fault=[{"index": 0, "pci_bus_id": PCI0}]),
        code="volatile-uncorrectable")
    assert fix_of(GPU_ECC, "volatile-uncorrectable") == ECC_FIX


def test_ecc_volatile_threshold_is_exclusive():
    a = ecc(vol_unc=2)
    assert run(GPU_ECC, [gpu(0, ecc=a)], ecc={"volatile_uncorrected_max": 2}).status == Status.PASS
    out = run(GPU_ECC, [gpu(0, ecc=ecc(vol_unc=3))], ecc={"volatile_uncorrected_max": 2})
    assert (out.status, out.summary) == (Status.FAIL, "GPU 0 3 volatile uncorrectable ECC error(s)")


def test_ecc_warnings_in_gpu_order_with_their_remediation():
    a = ecc(mode=False, pending=False)
    b = ecc(pending=False, agg_unc=2, agg_cor=11)
    c = ecc(mode=False, pending=True, agg_cor=10)
    out = run(GPU_ECC, [gpu(0, ecc=a), gpu(1, PCI0, ecc=b), gpu(2, ecc=c)],
              ecc={"aggregate_corrected_warn_above": 10})
    assert out == Outcome(
        Status.WARN,
        f"GPU 0 ECC disabled; GPU 1 ({PCI0}) ECC mode change pending a reboot; "
        f"GPU 1 ({PCI0}) 2 aggregate uncorrectable ECC error(s); "
        f"GPU 1 ({PCI0}) 11 aggregate corrected ECC error(s); GPU 2 ECC disabled",
        det({0: ecc_per(a), 1: ecc_per(b), 2: ecc_per(c)},
            at_fault=[{"index": 0}, {"index": 1, "pci_bus_id": PCI0}, {"index": 2}]),
        code="ecc-disabled")
    # The first warning names the code; every ECC warning shares one fix.
    for code in ("ecc-disabled", "ecc-mode-pending", "aggregate-errors"):
        assert fix_of(GPU_ECC, code) == ECC_WARN_FIX


def test_ecc_aggregate_thresholds_off_and_raised():
    a = ecc(agg_unc=5, agg_cor=10 ** 6)
    assert run(GPU_ECC, [gpu(0, ecc=a)],
               ecc={"aggregate_uncorrected_warn_above": None}).status == Status.PASS
    assert run(GPU_ECC, [gpu(0, ecc=a)],
               ecc={"aggregate_uncorrected_warn_above": 5}).status == Status.PASS
    out = run(GPU_ECC, [gpu(0, ecc=ecc(agg_unc=6))], ecc={"aggregate_uncorrected_warn_above": 5})
    assert out.summary == "GPU 0 6 aggregate uncorrectable ECC error(s)"


@pytest.mark.parametrize("field, value, name, expected", [
    ("volatile", "x", "gpus[1].ecc.volatile", "an object"),
    ("aggregate", [], "gpus[1].ecc.aggregate", "an object"),
    ("mode_current", "yes", "gpus[1].ecc.mode_current", "a boolean"),
    ("mode_pending", 1, "gpus[1].ecc.mode_pending", "a boolean"),
])
def test_ecc_malformed_field_is_unknown_naming_it(field, value, name, expected):
    bad = ecc()
    bad[field] = value
    good = ecc()
    out = run(GPU_ECC, [gpu(0, ecc=good), gpu(1, ecc=bad)])
    assert out == Outcome(
        Status.UNKNOWN,
        f"cannot read ECC counters: malformed snapshot: field {name} is {kind_of(value)}, "
        f"expected {expected}",
        det({0: ecc_per(good)}), code="snapshot-malformed")


@pytest.mark.parametrize("section, key", [("volatile", "uncorrected"),
                                          ("aggregate", "uncorrected"),
                                          ("aggregate", "corrected")])
def test_ecc_malformed_counter_is_unknown_naming_it(section, key):
    bad = ecc()
    bad[section][key] = "7"
    out = run(GPU_ECC, [gpu(0, ecc=bad)])
    assert out == Outcome(
        Status.UNKNOWN,
        f"cannot read ECC counters: malformed snapshot: field gpus[0].ecc.{section}.{key} is a "
        "string, expected an integer", det({}), code="snapshot-malformed")


def test_ecc_absent_counters_read_as_zero():
    e = {"mode_current": True, "mode_pending": True}
    assert run(GPU_ECC, [gpu(0, ecc=e)]) == Outcome(
        Status.PASS, "no uncorrectable ECC errors on 1 GPU(s)",
        det({0: {"volatile": {}, "aggregate": {}, "mode": True}}))


# -- gpu-ecc: faults the daemon recorded this boot -----------------------------------------
def fault(index: Optional[int] = 1, pci: Optional[str] = "0000:28:00.0", **more: Any):
    g = {k: v for k, v in (("index", index), ("pci", pci)) if v is not None}
    out: Dict[str, Any] = {"kind": "ecc", "gpu": g, "class": "reset-gpu", "last_mono_us": 100}
    out.update(more)
    return out


def test_sticky_ecc_fault_fails_though_the_counters_read_zero(tmp_path):
    a, b = ecc(), ecc()
    sticky = {"boot_id": "b1", "faults": [
        fault(message="XID 48: double bit ECC error"),
        fault(index=None, pci=None, gpu=None),  # no GPU identity at all
        fault(kind="xid", code=79),  # gpu-xid's, not this check's
    ], "clears": []}
    out = run(GPU_ECC, [gpu(0, ecc=a), gpu(1, ecc=b)], tmp_path, sticky, "b1")
    assert out == Outcome(
        Status.FAIL,
        "GPU 1 (0000:28:00.0) XID 48: double bit ECC error recorded this boot, not yet reset; "
        "GPU ? uncorrectable ECC fault recorded this boot, not yet reset",
        det({0: ecc_per(a), 1: ecc_per(b)}), code="sticky-ecc-fault")
    assert fix_of(GPU_ECC, "sticky-ecc-fault") == ECC_FIX


def test_sticky_ecc_fault_on_a_gpu_already_failing_is_not_repeated(tmp_path):
    sticky = {"boot_id": "b1", "faults": [fault(index=0, pci=None)], "clears": []}
    out = run(GPU_ECC, [gpu(0, ecc=ecc(vol_unc=4))], tmp_path, sticky, "b1")
    assert out.summary == "GPU 0 4 volatile uncorrectable ECC error(s)"


def test_sticky_ecc_fault_cleared_by_a_later_reset_or_from_another_boot(tmp_path):
    gpus = [gpu(1, ecc=ecc())]
    later = {"selector": "1", "mono_us": 200}
    assert run(GPU_ECC, gpus, tmp_path, {"boot_id": "b1", "faults": [fault()], "clears": [later]},
               "b1").status == Status.PASS
    # The default class of a fault without one is reset-gpu: a reset's clear covers it.
    classless = fault()
    del classless["class"]
    reset_only = {"selector": "all", "classes": ["reset-gpu"], "mono_us": 200}
    assert run(GPU_ECC, gpus, tmp_path, {"boot_id": "b1", "faults": [classless],
                                         "clears": [reset_only]}, "b1").status == Status.PASS
    reboot_only = {"selector": "all", "classes": ["reboot"], "mono_us": 200}
    assert run(GPU_ECC, gpus, tmp_path, {"boot_id": "b1", "faults": [classless],
                                         "clears": [reboot_only]}, "b1").status == Status.FAIL
    assert run(GPU_ECC, gpus, tmp_path, {"boot_id": "b0", "faults": [fault()], "clears": []},
               "b1").status == Status.PASS


# -- gpu-row-remap ------------------------------------------------------------------------
def rows(failure: Any = False, pending: Any = False) -> Dict[str, Any]:
    return {"failure": failure, "pending": pending, "correctable": 0, "uncorrectable": 0}


def test_remap_clean_gpus_pass():
    a, b = rows(), rows(None, None)
    assert run(GPU_ROW_REMAP, [gpu(0, remapped_rows=a), gpu(1, remapped_rows=b)]) == Outcome(
        Status.PASS, "no pending or failed row remaps on 2 GPU(s)", det({0: a, 1: b}))


def test_remap_failure_fails_and_pending_warns_by_default():
    a, b = rows(True, True), rows(pending=True)
    assert run(GPU_ROW_REMAP, [gpu(0, PCI0, remapped_rows=a), gpu(1, remapped_rows=b)]) == Outcome(
        Status.FAIL, f"GPU 0 ({PCI0}) row remapping failed (no spare rows left)",
        det({0: a, 1: b}, at_fault=[{"index": 0, "pci_bus_id": PCI0}]), code="remap-failure")
    assert fix_of(GPU_ROW_REMAP, "remap-failure") == REMAP_FIX
    assert run(GPU_ROW_REMAP, [gpu(1, remapped_rows=b)]) == Outcome(
        Status.WARN, "GPU 1 row remap pending: needs a GPU reset",
        det({1: b}, at_fault=[{"index": 1}]), code="remap-pending")
    assert fix_of(GPU_ROW_REMAP, "remap-pending") == REMAP_WARN_FIX


def test_remap_policy_can_swap_the_severities():
    a = rows(True, True)
    out = run(GPU_ROW_REMAP, [gpu(0, remapped_rows=a)],
              row_remap={"failure": "warn", "pending": "fail"})
    # The policy sets the status; the code (and so the declared fix) names what was found:
    # a pending remap failing is still fixed by a reset, not an RMA.
    assert out == Outcome(Status.FAIL, "GPU 0 row remap pending: needs a GPU reset",
                          det({0: a}, at_fault=[{"index": 0}]), code="remap-pending")
    out = run(GPU_ROW_REMAP, [gpu(0, remapped_rows=rows(True))], row_remap={"failure": "warn"})
    assert (out.status, out.summary) == (Status.WARN,
                                         "GPU 0 row remapping failed (no spare rows left)")
    assert out.code == "remap-failure"


@pytest.mark.parametrize("key", ["failure", "pending"])
def test_remap_malformed_flag_is_unknown_naming_it(key):
    bad = rows()
    bad[key] = "yes"
    assert run(GPU_ROW_REMAP, [gpu(0, remapped_rows=bad)]) == Outcome(
        Status.UNKNOWN,
        f"cannot read remapped rows: malformed snapshot: field gpus[0].remapped_rows.{key} is a "
        "string, expected a boolean", det({}), code="snapshot-malformed")


# -- gpu-thermal ----------------------------------------------------------------------------
def temp(now: Any, slowdown: Any = 90) -> Dict[str, Any]:
    return {"gpu_c": now, "slowdown_c": slowdown, "shutdown_c": 95}


def test_thermal_cool_gpus_pass():
    a, b = temp(84), temp(None)
    g0 = gpu(0, temperature=a, clock_event_reasons={"active": ["gpu_idle"]})
    assert run(GPU_THERMAL, [g0, gpu(1, temperature=b)]) == Outcome(
        Status.PASS, "2 GPU(s) below their slowdown temperature, no HW slowdown active",
        det({0: a, 1: b}))


@pytest.mark.parametrize("now, status, summary", [
    (90, Status.FAIL, f"GPU 0 ({PCI0}) at 90 C, slowdown threshold 90 C"),
    (91, Status.FAIL, f"GPU 0 ({PCI0}) at 91 C, slowdown threshold 90 C"),
    (89, Status.WARN, f"GPU 0 ({PCI0}) at 89 C, within 5 C of slowdown 90 C"),
    (85, Status.WARN, f"GPU 0 ({PCI0}) at 85 C, within 5 C of slowdown 90 C"),
])
def test_thermal_at_and_near_the_slowdown_temperature(now, status, summary):
    t = temp(now)
    out = run(GPU_THERMAL, [gpu(0, PCI0, temperature=t)])
    code = "at-slowdown-temperature" if status == Status.FAIL else "near-slowdown-temperature"
    assert out == Outcome(status, summary, det({0: t}, at_fault=[{"index": 0, "pci_bus_id": PCI0}]),
                          code=code)
    # The outcome leaves the fix to the declared failure: the cooling/power one at the
    # slowdown temperature, the check-wide text near it.
    fix = THERMAL_FIX if status == Status.FAIL else (
        "Fix cooling or power delivery; see `nvidia-smi -q -d PERFORMANCE,TEMPERATURE`.")
    assert fix_of(GPU_THERMAL, code) == fix


@pytest.mark.parametrize("now, status", [(87, Status.FAIL), (86, Status.WARN), (85, Status.WARN),
                                         (84, Status.PASS)])
def test_thermal_margins_from_the_policy(now, status):
    out = run(GPU_THERMAL, [gpu(0, temperature=temp(now))],
              thermal={"slowdown_margin_c": 3, "warn_margin_c": 2})
    assert out.status == status
    if status == Status.WARN:
        assert out.summary == f"GPU 0 at {now} C, within 2 C of slowdown 90 C"


def test_thermal_unknown_slowdown_temperature_is_not_judged():
    t = temp(120, None)
    assert run(GPU_THERMAL, [gpu(0, temperature=t)]).status == Status.PASS


def test_thermal_fault_clock_events_fail_naming_them():
    t = temp(40)
    events = {"active": ["hw_slowdown", "gpu_idle", "sw_thermal_slowdown", "sw_power_cap"]}
    out = run(GPU_THERMAL, [gpu(0, temperature=t, clock_event_reasons=events),
                            gpu(1, temperature=temp(89))])
    assert out == Outcome(
        Status.FAIL, "GPU 0 clocks slowed: hw_slowdown, sw_thermal_slowdown active",
        det({0: t, 1: temp(89)}, at_fault=[{"index": 0}]), code="clocks-slowed")
    assert fix_of(GPU_THERMAL, "clocks-slowed") == THERMAL_FIX


@pytest.mark.parametrize("fields, message", [
    ({"temperature": temp("hot")},
     "field gpus[0].temperature.gpu_c is a string, expected an integer"),
    ({"temperature": temp(40, 90.5)},
     "field gpus[0].temperature.slowdown_c is a number, expected an integer"),
    ({"temperature": temp(40), "clock_event_reasons": "x"},
     "field gpus[0].clock_event_reasons is a string, expected an object"),
    ({"temperature": temp(40), "clock_event_reasons": {"active": [1]}},
     "field gpus[0].clock_event_reasons.active is a list, expected a list of strings"),
])
def test_thermal_malformed_field_is_unknown_naming_it(fields, message):
    assert run(GPU_THERMAL, [gpu(0, **fields)]) == Outcome(
        Status.UNKNOWN, f"cannot read temperature: malformed snapshot: {message}", det({}),
        code="snapshot-malformed")


def test_sticky_ecc_fault_after_the_last_clear_still_fails(tmp_path):
    gpus = [gpu(1, ecc=ecc())]
    # by the monotonic clock: the fault (100) is after the reset (50)
    early = {"selector": "1", "mono_us": 50}
    out = run(GPU_ECC, gpus, tmp_path, {"boot_id": "b1", "faults": [fault()], "clears": [early]},
              "b1")
    assert out.summary == ("GPU 1 (0000:28:00.0) uncorrectable ECC fault recorded this boot, "
                           "not yet reset")
    # by the wall clock, when the fault has no monotonic time
    walled = fault(last_at=1000.0)
    del walled["last_mono_us"]
    before = {"selector": "all", "at": 500.0}
    assert run(GPU_ECC, gpus, tmp_path, {"boot_id": "b1", "faults": [walled], "clears": [before]},
               "b1").status == Status.FAIL
    after = {"selector": "all", "at": 1500.0}
    assert run(GPU_ECC, gpus, tmp_path, {"boot_id": "b1", "faults": [walled], "clears": [after]},
               "b1").status == Status.PASS


def test_a_malformed_gpu_does_not_stop_the_next_one_from_being_judged():
    # ECC: GPU 0's counters are malformed, GPU 1 has a volatile uncorrectable error
    bad = ecc()
    bad["volatile"] = "x"
    out = run(GPU_ECC, [gpu(0, ecc=bad), gpu(1, ecc=ecc(vol_unc=1))])
    assert (out.status, out.summary) == (Status.FAIL,
                                         "GPU 1 1 volatile uncorrectable ECC error(s)")
    out = run(GPU_ROW_REMAP, [gpu(0, remapped_rows=rows("yes")), gpu(1, remapped_rows=rows(True))])
    assert (out.status, out.summary) == (Status.FAIL,
                                         "GPU 1 row remapping failed (no spare rows left)")
    out = run(GPU_THERMAL, [gpu(0, temperature=temp("hot")), gpu(1, temperature=temp(95))])
    assert (out.status, out.summary) == (Status.FAIL, "GPU 1 at 95 C, slowdown threshold 90 C")


def test_sticky_ecc_faults_after_a_skipped_or_cleared_one_are_still_reported(tmp_path):
    gpus = [gpu(1, ecc=ecc()), gpu(2, ecc=ecc())]
    faults = [fault(kind="xid", code=79), fault(), fault(index=2, pci="0000:38:00.0")]
    clears = [{"selector": "1", "mono_us": 200}]  # clears GPU 1's fault only
    out = run(GPU_ECC, gpus, tmp_path, {"boot_id": "b1", "faults": faults, "clears": clears},
              "b1")
    assert out.summary == ("GPU 2 (0000:38:00.0) uncorrectable ECC fault recorded this boot, "
                           "not yet reset")


def test_sticky_ecc_fault_needing_a_reboot_is_not_cleared_by_a_gpu_reset(tmp_path):
    # An observed reset clears only the classes it lists (agent/state.py cleared()).
    gpus = [gpu(1, ecc=ecc())]
    reset = {"selector": "all", "classes": ["reset-gpu"], "mono_us": 200}
    needs_reboot = fault()
    needs_reboot["class"] = "reboot"
    sticky = {"boot_id": "b1", "faults": [needs_reboot], "clears": [reset]}
    assert run(GPU_ECC, gpus, tmp_path, sticky, "b1").status == Status.FAIL
