"""gpu-ecc (checks/gpu/gpu_ecc.py) on fixture bundles: each way it fails, by its failure code.
Rows and tests moved from tests/checks/test_gpu_checks.py keep their names and asserts
(the asserts of test_each_failure: tests/checks/gpu_support.py each_failure)."""
import pytest

from tests.checks.gpu_support import code_on, each_failure, results


@pytest.mark.parametrize("name, check_id, status, gpu, needle", [
    ("gpu-ecc-uncorrectable", "gpu-ecc", "fail", 2, "2 volatile uncorrectable ECC error(s)"),
    ("gpu-ecc-sticky", "gpu-ecc", "fail", None, "GPU 2 (0000:4a:00.0) 2 volatile uncorrectable "
     "ECC error(s) recorded this boot, not yet reset"),
])
def test_each_failure(name, check_id, status, gpu, needle):
    each_failure(name, check_id, status, gpu, needle)


# Every declared code on a bundle that produces it (the contract test asks for one; here
# the summary and the fix are held too). Needles are facts of the scenario files.
@pytest.mark.parametrize("name, check_id, status, code, needle", [
    ("gpu-ecc-uncorrectable", "gpu-ecc", "fail", "volatile-uncorrectable",
     "2 volatile uncorrectable ECC error(s)"),
    ("gpu-ecc-sticky", "gpu-ecc", "fail", "sticky-ecc-fault",
     "GPU 2 (0000:4a:00.0) 2 volatile uncorrectable "
     "ECC error(s) recorded this boot, not yet reset"),
    ("gpu-ecc-disabled", "gpu-ecc", "warn", "ecc-disabled",
     "GPU 0 (00000000:1A:00.0) ECC disabled"),
    ("gpu-ecc-mode-pending", "gpu-ecc", "warn", "ecc-mode-pending",
     "GPU 0 (00000000:1A:00.0) ECC mode change pending a reboot"),
    ("gpu-ecc-aggregate-errors", "gpu-ecc", "warn", "aggregate-errors",
     "1 aggregate uncorrectable ECC error(s)"),
    ("gpu-ecc-field-unreadable", "gpu-ecc", "unknown", "field-unreadable",
     "GPU 0 (00000000:1A:00.0) ecc: corrupted_inforom"),
    ("gpu-ecc-snapshot-malformed", "gpu-ecc", "unknown", "snapshot-malformed",
     "gpus[0].ecc.volatile.uncorrected is a string, expected an integer"),
])
def test_each_code_on_its_bundle(name, check_id, status, code, needle):
    code_on(name, check_id, status, code, needle)


def test_policy_thresholds_are_data(tmp_path):
    """Raising the volatile threshold above the bundle's count (2) turns the fail into a
    warn for the aggregate count, which the policy still flags."""
    config = tmp_path / "config.yaml"
    config.write_text("policy:\n  gpu:\n    ecc:\n      volatile_uncorrected_max: 2\n")
    _, checks, _ = results("gpu-ecc-uncorrectable", config=config)
    assert checks["gpu-ecc"]["status"] == "warn"
    assert "2 aggregate uncorrectable" in checks["gpu-ecc"]["summary"]
