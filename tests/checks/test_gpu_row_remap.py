"""gpu-row-remap (checks/gpu/gpu_row_remap.py) on fixture bundles: each way it fails, by its failure code.
Rows and tests moved from tests/checks/test_gpu_checks.py keep their names and asserts
(the asserts of test_each_failure: tests/checks/gpu_support.py each_failure)."""
import pytest

from tests.checks.gpu_support import code_on, each_failure


@pytest.mark.parametrize("name, check_id, status, gpu, needle", [
    ("gpu-remap-pending", "gpu-row-remap", "warn", 1, "row remap pending: needs a GPU reset"),
    ("gpu-remap-failure", "gpu-row-remap", "fail", 6, "row remapping failed"),
])
def test_each_failure(name, check_id, status, gpu, needle):
    each_failure(name, check_id, status, gpu, needle)


# Every declared code on a bundle that produces it (the contract test asks for one; here
# the summary and the fix are held too). Needles are facts of the scenario files.
@pytest.mark.parametrize("name, check_id, status, code, needle", [
    ("gpu-remap-pending", "gpu-row-remap", "warn", "remap-pending",
     "row remap pending: needs a GPU reset"),
    ("gpu-remap-failure", "gpu-row-remap", "fail", "remap-failure",
     "row remapping failed"),
    ("gpu-row-remap-field-unreadable", "gpu-row-remap", "unknown", "field-unreadable",
     "GPU 0 (00000000:1A:00.0) remapped_rows: nvml_error"),
    ("gpu-row-remap-snapshot-malformed", "gpu-row-remap", "unknown", "snapshot-malformed",
     "gpus[0].remapped_rows.pending is a string, expected a boolean"),
])
def test_each_code_on_its_bundle(name, check_id, status, code, needle):
    code_on(name, check_id, status, code, needle)
