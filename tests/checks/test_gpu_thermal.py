"""gpu-thermal (checks/gpu/gpu_thermal.py) on fixture bundles: each way it fails, by its failure code.
Rows and tests moved from tests/checks/test_gpu_checks.py keep their names and asserts
(the asserts of test_each_failure: tests/checks/gpu_support.py each_failure)."""
import pytest

from tests.checks.gpu_support import code_on, each_failure


@pytest.mark.parametrize("name, check_id, status, gpu, needle", [
    ("gpu-hw-slowdown", "gpu-thermal", "fail", 5, "hw_slowdown, hw_power_brake_slowdown active"),
    ("gpu-hot", "gpu-thermal", "fail", 3, "at 88 C, slowdown threshold 87 C"),
])
def test_each_failure(name, check_id, status, gpu, needle):
    each_failure(name, check_id, status, gpu, needle)


# Every declared code on a bundle that produces it (the contract test asks for one; here
# the summary and the fix are held too). Needles are facts of the scenario files.
@pytest.mark.parametrize("name, check_id, status, code, needle", [
    ("gpu-hw-slowdown", "gpu-thermal", "fail", "clocks-slowed",
     "hw_slowdown, hw_power_brake_slowdown active"),
    ("gpu-hot", "gpu-thermal", "fail", "at-slowdown-temperature",
     "at 88 C, slowdown threshold 87 C"),
    ("gpu-thermal-near-slowdown", "gpu-thermal", "warn", "near-slowdown-temperature",
     "at 84 C, within 5 C of slowdown 87 C"),
    ("gpu-thermal-field-unreadable", "gpu-thermal", "unknown", "field-unreadable",
     "GPU 0 (00000000:1A:00.0) temperature: nvml_error"),
    ("gpu-thermal-snapshot-malformed", "gpu-thermal", "unknown", "snapshot-malformed",
     "gpus[0].temperature.gpu_c is a string, expected an integer"),
])
def test_each_code_on_its_bundle(name, check_id, status, code, needle):
    code_on(name, check_id, status, code, needle)
