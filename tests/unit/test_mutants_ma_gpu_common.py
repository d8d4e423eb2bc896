"""checks/gpu/common.py, piece by piece: the failures every GPU check declares, the unknown a
malformed field becomes, how Findings folds per-GPU findings into one Outcome (which status,
which code, which GPUs it names, the lost-GPU tail), how each_field sorts GPUs, and the
settings and policy lookups.

Expected values are written by hand from the module's docstrings and docs/gpu-snapshot.md
("How the GPU checks read it": a lost GPU is gpu-count's, a not_supported field is no fault,
any other error makes the check unknown); the GPU identity in details["gpus_at_fault"] is the
snapshot entry's index, uuid and pci_bus_id (agent/gpu_health.py matches GPUs on them).
"""
from typing import Any, Dict, List

import pytest

from agent.model import Failure, Status
from checks.gpu.common import (
    FIELD_UNREADABLE,
    SNAPSHOT_MALFORMED,
    Findings,
    each_field,
    gpu_label,
    gpu_policy,
    gpu_ref,
    malformed,
    setting,
    snapshot_failures,
)
from checks.gpu.policy import GpuPolicy
from checks.gpu.readers import SnapshotError
from checks.policy import ResolvedPolicy, load_policy

BUS = "00000000:18:00.0"
UUID = "GPU-0a1b2c3d-0000-1111-2222-333344445555"


def test_every_gpu_check_declares_the_two_snapshot_unknowns_word_for_word():
    doc = 'docs/gpu-snapshot.md, "How the GPU checks read it"'
    assert snapshot_failures() == (
        Failure("snapshot-malformed", Status.UNKNOWN,
                "a snapshot field has the wrong type (the summary names the field)",
                "The snapshot is not what the NVML worker writes (docs/gpu-snapshot.md): "
                "collect the bundle again; if the running agent produced it, report an agent "
                "bug with the field named.", doc),
        Failure("field-unreadable", Status.UNKNOWN,
                "NVML answered an error other than not_supported for the field the check "
                "reads", "The GPU's errors[field] in gpus.json names the NVML error: "
                "function_not_found means a driver older than the call (upgrade the driver); "
                "for the others see docs/runbook-nvml.md.", doc),
    )
    assert snapshot_failures(True) == snapshot_failures()
    # gpu-count reads no per-GPU field: neither unknown is its own
    assert snapshot_failures(reads_fields=False) == ()


def test_a_malformed_field_is_unknown_naming_the_field():
    exc = SnapshotError("gpus[2].ecc.volatile", "an object", [1])
    out = malformed(exc)
    assert (out.status, out.code, out.summary, dict(out.details)) == (
        Status.UNKNOWN, "snapshot-malformed",
        "GPU snapshot malformed: field gpus[2].ecc.volatile is a list, expected an object",
        {"field": "gpus[2].ecc.volatile"})
    assert malformed(exc, code="my-code").code == "my-code"


def test_a_gpu_is_labelled_by_index_and_bus():
    assert gpu_label({"index": 3, "pci_bus_id": BUS}) == f"GPU 3 ({BUS})"
    assert gpu_label({"index": 3}) == "GPU 3"
    assert gpu_label({"index": 3, "pci_bus_id": ""}) == "GPU 3"


@pytest.mark.parametrize("entry,ref", [
    ({"index": 1, "uuid": UUID, "pci_bus_id": BUS}, {"index": 1, "uuid": UUID, "pci_bus_id": BUS}),
    # the daemon's sticky faults name the slot "pci"
    ({"index": 1, "pci": BUS}, {"index": 1, "pci_bus_id": BUS}),
    ({"index": True, "uuid": UUID}, {"uuid": UUID}),
    ({"index": "1", "uuid": 5, "pci_bus_id": ""}, None),
    ({"uuid": "G" * 100}, {"uuid": "G" * 80}),
    ({}, None),
    ("GPU 1", None),
    (None, None),
])
def test_a_gpu_is_named_at_fault_only_by_well_typed_identity(entry, ref):
    assert gpu_ref(entry) == ref


def _findings(gpus: List[Dict[str, Any]], name: str = "f", expected: type = dict) -> Findings:
    f = Findings()
    snap: Any = {"gpus": gpus}
    for gpu, value in each_field(snap, name, f, expected=expected):
        if value == "bad":
            f.malformed(SnapshotError(f.where, "good", value))
        elif value in ("warn", "fail"):
            # named by the GPU each_field is on
            (f.warn if value == "warn" else f.fail)(value + "-code", f"GPU {gpu['index']} {value}")
    return f


def test_each_field_sorts_lost_unsupported_unreadable_and_wrong_type_gpus():
    gpus: List[Dict[str, Any]] = [
        {"index": 0, "f": {"x": 1}},
        {"index": 1, "error": {"kind": "gpu_lost"}},
        {"index": 2, "f": None, "errors": {"f": {"kind": "not_supported"}}},
        {"index": 3, "pci_bus_id": BUS, "errors": {"f": {"kind": "nvml_error",
                                                         "message": "m" * 300}}},
        {"index": 4, "errors": {"f": "nvml_error"}},
        {"index": 5, "f": [1]},
    ]
    f = _findings(gpus)
    assert (f.checked, f.lost, f.unsupported) == (1, [1], [2])
    assert f.unreadable == [
        (FIELD_UNREADABLE, f"GPU 3 ({BUS}) f: nvml_error ({'m' * 200})"),
        (FIELD_UNREADABLE, "GPU 4 f: missing"),
        (SNAPSHOT_MALFORMED, "malformed snapshot: field gpus[5].f is a list, expected an object"),
    ]
    assert (f.gpu_where, f.where, f.gpu) == ("gpus[0]", "gpus[0].f", None)
    out = f.outcome("{n} ok", "thing")
    assert (out.status, out.code) == (Status.UNKNOWN, FIELD_UNREADABLE)
    assert out.summary == (f"cannot read thing: GPU 3 ({BUS}) f: nvml_error ({'m' * 200}); GPU 4 "
                           "f: missing; malformed snapshot: field gpus[5].f is a list, expected "
                           "an object; GPU 1 lost (see gpu-count)")
    assert dict(out.details) == {"per_gpu": {}, "lost_gpus": [1], "unsupported_gpus": [2]}


def test_each_field_refuses_a_boolean_where_it_expects_one_or_an_integer():
    f = _findings([{"index": 0, "f": 1}, {"index": 1, "f": True}, {"index": 2, "f": False}],
                  expected=bool)
    assert f.unreadable == [(SNAPSHOT_MALFORMED, "malformed snapshot: field gpus[0].f is an "
                                                 "integer, expected a boolean")]
    assert f.checked == 2
    g = _findings([{"index": 0, "f": 7}, {"index": 1, "f": True}], expected=int)
    # (the expected-type words for an integer field are not asserted: each_field says "an
    # object" for every type but bool, reported to the lead)
    assert [m.startswith("malformed snapshot: field gpus[1].f is a boolean, expected ")
            for _, m in g.unreadable] == [True]
    assert g.checked == 1


def test_a_gpu_whose_field_is_malformed_is_not_counted_checked():
    f = _findings([{"index": i, "f": "bad" if i == 2 else "ok"} for i in range(3)], expected=str)
    assert f.checked == 2
    assert f.unreadable == [(SNAPSHOT_MALFORMED,
                             "malformed snapshot: field gpus[2].f is a string, expected good")]


def test_findings_name_the_gpu_each_field_is_on():
    gpus = [{"index": 0, "uuid": UUID, "f": "warn"}, {"index": 1, "pci_bus_id": BUS, "f": "warn"},
            {"index": 2, "f": "ok"}]
    out = _findings(gpus, expected=str).outcome("{n} ok", "thing")
    assert (out.status, out.code, out.summary) == (Status.WARN, "warn-code",
                                                   "GPU 0 warn; GPU 1 warn")
    assert out.details["gpus_at_fault"] == [{"index": 0, "uuid": UUID},
                                            {"index": 1, "pci_bus_id": BUS}]


def test_a_finding_outside_the_gpu_loop_names_the_gpu_it_is_given_or_none():
    f = Findings(checked=1)
    f.warn("w", "GPU 4 hot", {"index": 4})
    f.warn("w", "GPU 4 hot again", {"index": 4})
    assert f.outcome("ok", "x").details["gpus_at_fault"] == [{"index": 4}]
    f.warn("w2", "host-wide")  # names no GPU: the verdict is not wholly the GPUs'
    out = f.outcome("ok", "x")
    assert (out.status, "gpus_at_fault" in out.details) == (Status.WARN, False)
    g = Findings(checked=1)
    g.fail("f", "GPU 2 bad", {"index": 2})
    g.warn("w", "host-wide")
    assert g.outcome("ok", "x").details["gpus_at_fault"] == [{"index": 2}]


def test_findings_outcome_per_branch():
    lost = Findings(checked=0, lost=[3, 5])
    out = lost.outcome("{n} ok", "thing")
    assert (out.status, out.summary) == (
        Status.SKIP, "no readable GPU to check thing on; GPU 3, 5 lost (see gpu-count)")
    assert dict(out.details) == {"per_gpu": {}, "lost_gpus": [3, 5], "unsupported_gpus": []}
    unsupported = Findings(checked=0, unsupported=[0, 1])
    out = unsupported.outcome("{n} ok", "thing")
    assert (out.status, out.summary) == (Status.SKIP, "thing not supported on any GPU")
    assert dict(out.details) == {"per_gpu": {}, "lost_gpus": [], "unsupported_gpus": [0, 1]}
    some = Findings(checked=2, unsupported=[4], lost=[7], per_gpu={0: "a"})
    out = some.outcome("{n} GPU(s) fine", "thing", extra=1)
    assert (out.status, out.summary) == (
        Status.PASS, "2 GPU(s) fine (1 GPU(s) without thing); GPU 7 lost (see gpu-count)")
    assert dict(out.details) == {"extra": 1, "per_gpu": {0: "a"}, "lost_gpus": [7],
                                 "unsupported_gpus": [4]}
    failing = Findings(checked=1, lost=[2])
    failing.fail("c", "GPU 0 bad", {"index": 0})
    out = failing.outcome("{n} ok", "thing")
    assert (out.status, out.code, out.summary) == (Status.FAIL, "c",
                                                   "GPU 0 bad; GPU 2 lost (see gpu-count)")
    assert out.details["gpus_at_fault"] == [{"index": 0}]
    warning = Findings(checked=1, lost=[2])
    warning.warn("w", "GPU 0 warm", {"index": 0})
    assert warning.outcome("{n} ok", "thing").summary == "GPU 0 warm; GPU 2 lost (see gpu-count)"


class _Settings:
    def __init__(self, settings: Dict[str, Any]) -> None:
        self.settings = settings

    def setting(self, section: str) -> Any:
        return self.settings.get(section)


def test_a_setting_falls_back_to_its_default():
    pol: Any = _Settings({"gpu": {"mig_geometry": {"0": ["1g.10gb"]}}, "flat": 3})
    bare: Any = object()
    assert setting(pol, "gpu", "mig_geometry", {}) == {"0": ["1g.10gb"]}
    assert setting(pol, "gpu", "other", "d") == "d"
    assert setting(pol, "flat", "x", "d") == "d"  # a section that is no mapping
    assert setting(pol, "absent", "x", None) is None
    assert setting(bare, "gpu", "mig_geometry", "d") == "d"  # no settings at all


def test_the_gpu_policy_section_or_its_defaults():
    pol = ResolvedPolicy(load_policy(1, {"gpu": {"ecc": {"volatile_uncorrected_max": 4}}}), "dra")
    assert gpu_policy(pol).ecc.volatile_uncorrected_max == 4
    bare: Any = object()
    assert gpu_policy(bare) == GpuPolicy()
    assert gpu_policy(bare).ecc.volatile_uncorrected_max == 0
