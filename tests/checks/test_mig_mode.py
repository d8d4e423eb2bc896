"""mig-mode (checks/gpu/mig_mode.py) on fixture bundles: each way it fails, by its failure code.
Rows and tests moved from tests/checks/test_gpu_checks.py keep their names and asserts
(the asserts of test_each_failure: tests/checks/gpu_support.py each_failure)."""
import pytest

from tests.checks.gpu_support import code_on, each_failure, results


@pytest.mark.parametrize("name, check_id, status, gpu, needle", [
    ("gpu-mig-pending", "mig-mode", "fail", 0, "MIG enabled is pending"),
    ("gpu-mig-enabled", "mig-mode", "fail", 0, "has MIG enabled but the MIG strategy is none"),
])
def test_each_failure(name, check_id, status, gpu, needle):
    each_failure(name, check_id, status, gpu, needle)


# Every declared code on a bundle that produces it (the contract test asks for one; here
# the summary and the fix are held too). Needles are facts of the scenario files.
@pytest.mark.parametrize("name, check_id, status, code, needle", [
    ("gpu-mig-pending", "mig-mode", "fail", "mig-change-pending",
     "MIG enabled is pending"),
    ("gpu-mig-enabled", "mig-mode", "fail", "mig-strategy-mismatch",
     "has MIG enabled but the MIG strategy is none"),
    ("mig-mode-field-unreadable", "mig-mode", "unknown", "field-unreadable",
     "GPU 0 (00000000:1A:00.0) mig: nvml_error"),
    ("mig-mode-snapshot-malformed", "mig-mode", "unknown", "snapshot-malformed",
     "gpus[0].mig.current is a list, expected a string"),
])
def test_each_code_on_its_bundle(name, check_id, status, code, needle):
    code_on(name, check_id, status, code, needle)


@pytest.mark.parametrize("strategy, status", [("none", "fail"), ("single", "pass"), ("mixed", "pass")])
def test_mig_strategy_from_the_config(tmp_path, strategy, status):
    config = tmp_path / "config.yaml"
    config.write_text(f"gpu:\n  mig_strategy: {strategy}\n")
    _, checks, _ = results("gpu-mig-enabled", config=config)
    assert checks["mig-mode"]["status"] == status
    _, checks, _ = results("gpu-h100-snapshot-only", config=config)
    assert checks["mig-mode"]["status"] == ("fail" if strategy == "single" else "pass")
