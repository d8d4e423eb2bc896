"""gpu-nvlink (checks/gpu/gpu_nvlink.py) on fixture bundles: each way it fails, by its failure code.
Rows and tests moved from tests/checks/test_gpu_checks.py keep their names and asserts
(the asserts of test_each_failure: tests/checks/gpu_support.py each_failure)."""
import pytest

from tests.checks.gpu_support import code_on, each_failure


@pytest.mark.parametrize("name, check_id, status, gpu, needle", [
    ("gpu-nvlink-down", "gpu-nvlink", "fail", 6, "NVLink 3 inactive"),
])
def test_each_failure(name, check_id, status, gpu, needle):
    each_failure(name, check_id, status, gpu, needle)


# Every declared code on a bundle that produces it (the contract test asks for one; here
# the summary and the fix are held too). Needles are facts of the scenario files.
@pytest.mark.parametrize("name, check_id, status, code, needle", [
    ("gpu-nvlink-down", "gpu-nvlink", "fail", "nvlink-inactive",
     "NVLink 3 inactive"),
    ("gpu-nvlink-field-unreadable", "gpu-nvlink", "unknown", "field-unreadable",
     "GPU 0 (00000000:1A:00.0) nvlink: nvml_error"),
    ("gpu-nvlink-snapshot-malformed", "gpu-nvlink", "unknown", "snapshot-malformed",
     "gpus[0].nvlink.links is an object, expected a list"),
])
def test_each_code_on_its_bundle(name, check_id, status, code, needle):
    code_on(name, check_id, status, code, needle)
