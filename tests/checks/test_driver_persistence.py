"""driver-persistence (checks/gpu/driver_persistence.py) on fixture bundles: each way it fails, by its failure code.
Rows and tests moved from tests/checks/test_gpu_checks.py keep their names and asserts
(the asserts of test_each_failure: tests/checks/gpu_support.py each_failure)."""
import pytest

from tests.checks.gpu_support import code_on, each_failure


@pytest.mark.parametrize("name, check_id, status, gpu, needle", [
    ("gpu-persistence-off", "driver-persistence", "fail", 0, "persistence mode off"),
])
def test_each_failure(name, check_id, status, gpu, needle):
    each_failure(name, check_id, status, gpu, needle)


# Every declared code on a bundle that produces it (the contract test asks for one; here
# the summary and the fix are held too). Needles are facts of the scenario files.
@pytest.mark.parametrize("name, check_id, status, code, needle", [
    ("gpu-persistence-off", "driver-persistence", "fail", "persistence-off",
     "persistence mode off"),
    ("driver-persistence-field-unreadable", "driver-persistence", "unknown", "field-unreadable",
     "GPU 0 (00000000:1A:00.0) persistence_mode: nvml_error"),
    ("driver-persistence-snapshot-malformed", "driver-persistence", "unknown", "snapshot-malformed",
     "gpus[0].persistence_mode is a string, expected a boolean"),
])
def test_each_code_on_its_bundle(name, check_id, status, code, needle):
    code_on(name, check_id, status, code, needle)
