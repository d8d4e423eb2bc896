"""What the GPU checks share (checks/gpu/common.py): every one passes on the healthy bundles,
every one is built by gpu_check (the prologue: no snapshot, a malformed one, an NVML-level
error), and Findings names the first code of the status it reports. The per-check tests are
tests/checks/test_<module>.py."""
import pytest

from agent.model import Status
from checks.gpu import common
from checks.gpu.common import (
    FIELD_UNREADABLE,
    SNAPSHOT_MALFORMED,
    Findings,
    gpu_check,
)
from checks.policy import ResolvedPolicy, load_policy
from checks.registry import ALL_CHECKS
from tests.checks.gpu_support import GPU_IDS, results

# A run gpu_check built: its code is gpu_check's inner function (functools.wraps gives it the
# judge's name and module, not its code).
PROLOGUE = gpu_check(lambda host, policy, snap: common.passed("")).__code__
GPU_CHECKS = [c for c in ALL_CHECKS if getattr(c.run, "__code__", None) is PROLOGUE]
POLICY = ResolvedPolicy(load_policy(1), "dra")


class Host:
    """The one read the prologue makes: the snapshot."""

    def __init__(self, snapshot):
        self.snapshot = snapshot

    def gpus(self):
        return self.snapshot


@pytest.mark.parametrize("name", ["gpu-h100-snapshot-only", "gpu-h200-snapshot-only"])
@pytest.mark.parametrize("path", ["device-plugin", "dra", "operator-clusterpolicy", "operator-gpucluster"])
def test_healthy_bundles_pass_every_gpu_check(name, path):
    rc, checks, doc = results(name, path)
    assert {i: c["status"] for i, c in checks.items()} == {i: "pass" for i in GPU_IDS.split(",")}
    assert rc == 0 and doc["gate"]["open"] is True


def test_every_gpu_check_is_built_by_gpu_check():
    # The nine of the family (GPU_IDS less nvml-responsive, which owns what the prologue guards).
    assert sorted(c.id for c in GPU_CHECKS) == sorted(GPU_IDS.split(",")[1:])
    for check in GPU_CHECKS:
        judge = check.run.__wrapped__  # functools.wraps: the judge, in the check's own module
        assert judge.__module__ == "checks.gpu." + check.id.replace("-", "_"), check.id


# No snapshot, a malformed structure, an NVML error: nvml-responsive owns each (its own codes
# snapshot-missing, snapshot-malformed and the NVML error kinds), so a GPU check called
# directly skips naming it, as the engine does over a bundle (requires nvml-responsive).
@pytest.mark.parametrize("check", GPU_CHECKS, ids=lambda c: c.id)
def test_the_prologue_without_a_snapshot_skips_naming_nvml_responsive(check):
    out = check.run(Host(None), POLICY)
    assert (out.status, out.skip, out.code) == (Status.SKIP, "needs:nvml-responsive", None)
    assert out.summary == "needs nvml-responsive (no GPU snapshot for this host: no gpus.json)"
    assert "snapshot-missing" not in {f.code for f in check.failures}


@pytest.mark.parametrize("check", GPU_CHECKS, ids=lambda c: c.id)
def test_a_malformed_structure_skips_naming_nvml_responsive_and_the_field(check):
    out = check.run(Host({"gpus": [{"index": "0"}]}), POLICY)
    assert (out.status, out.skip, out.code) == (Status.SKIP, "needs:nvml-responsive", None)
    assert out.details["field"] == "gpus[0].index"
    assert "is a string, expected a non-negative integer" in out.summary


@pytest.mark.parametrize("check", GPU_CHECKS, ids=lambda c: c.id)
def test_an_nvml_error_is_a_skip_naming_nvml_responsive(check):
    out = check.run(Host({"error": {"kind": "driver_not_loaded", "message": "x"}, "gpus": []}),
                    POLICY)
    assert (out.status, out.skip, out.code) == (Status.SKIP, "needs:nvml-responsive", None)
    assert out.summary == "needs nvml-responsive (NVML error: driver_not_loaded)"


def test_the_judge_runs_only_on_a_usable_snapshot():
    seen = []

    def judge(host, policy, snap):
        seen.append(snap)
        return common.passed("judged")

    run = gpu_check(judge)
    assert run.__name__ == "judge" and run.__wrapped__ is judge
    for unusable in (None, {"gpus": 5}, {"error": {"kind": "timeout"}, "gpus": []}):
        assert run(Host(unusable), POLICY).summary != "judged"
    assert seen == []
    usable = {"gpus": [{"index": 0}], "error": None}
    assert run(Host(usable), POLICY).summary == "judged"
    assert seen == [usable]


def test_findings_name_the_first_code_of_the_status_they_report():
    f = Findings(checked=2)
    f.warn("w-1", "first warning")
    f.unreadable.append((FIELD_UNREADABLE, "GPU 1 x: nvml_error"))
    assert (f.outcome("ok", "x").status, f.outcome("ok", "x").code) == (Status.UNKNOWN,
                                                                         FIELD_UNREADABLE)
    f.fail("f-1", "first failure")
    f.fail("f-2", "second failure")
    out = f.outcome("ok", "x")
    assert (out.status, out.code) == (Status.FAIL, "f-1")
    assert out.summary == "first failure; second failure"
    assert out.remediation is None  # the engine takes the declared failure's fix


def test_findings_warn_with_the_first_warning_code_and_pass_without_any():
    f = Findings(checked=1)
    assert (f.outcome("{n} ok", "x").status, f.outcome("{n} ok", "x").summary) == (
        Status.PASS, "1 ok")
    f.warn("w-1", "a")
    f.warn("w-2", "b")
    out = f.outcome("{n} ok", "x")
    assert (out.status, out.code, out.summary) == (Status.WARN, "w-1", "a; b")


@pytest.mark.parametrize("check", GPU_CHECKS, ids=lambda c: c.id)
def test_every_gpu_check_declares_the_prologue_codes(check):
    codes = {f.code for f in check.failures}
    # A per-GPU field of the wrong type or unreadable is the check's own; gpu-count reads no
    # per-GPU field through each_field, so it has neither. A missing snapshot never is.
    if check.id == "gpu-count":
        assert not {SNAPSHOT_MALFORMED, FIELD_UNREADABLE} & codes
    else:
        assert {SNAPSHOT_MALFORMED, FIELD_UNREADABLE} <= codes
    assert "snapshot-missing" not in codes


@pytest.mark.parametrize("expected, value, words", [
    # gpu-sku reads pci_device_id as an integer (nvml.h nvmlPciInfo_t.pciDeviceId, unsigned int)
    (int, "0x233010DE", "is a string, expected an integer"),
    (int, True, "is a boolean, expected an integer"),
    (bool, 1, "is an integer, expected a boolean"),
    (dict, [1], "is a list, expected an object"),
])
def test_a_field_of_the_wrong_type_names_the_type_it_should_have(expected, value, words):
    snap = {"gpus": [{"index": 0, "uuid": "GPU-0", "f": value}]}
    findings = Findings()
    assert list(common.each_field(snap, "f", findings, expected)) == []
    assert findings.unreadable == [
        (SNAPSHOT_MALFORMED, f"malformed snapshot: field gpus[0].f {words}")]
