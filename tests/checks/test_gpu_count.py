"""gpu-count (checks/gpu/gpu_count.py) on fixture bundles: each way it fails, by its failure code.
Rows and tests moved from tests/checks/test_gpu_checks.py keep their names and asserts
(the asserts of test_each_failure: tests/checks/gpu_support.py each_failure)."""
import pytest

from tests.checks.gpu_support import code_on, each_failure, results


@pytest.mark.parametrize("name, check_id, status, gpu, needle", [
    ("gpu-lost", "gpu-count", "fail", None, "GPU 3 not usable: gpu_lost"),
    ("gpu-pci8-nvml7", "gpu-count", "fail", None, "8 NVIDIA GPU(s) on PCI but NVML sees 7"),
])
def test_each_failure(name, check_id, status, gpu, needle):
    each_failure(name, check_id, status, gpu, needle)


# Every declared code on a bundle that produces it (the contract test asks for one; here
# the summary and the fix are held too). Needles are facts of the scenario files.
@pytest.mark.parametrize("name, check_id, status, code, needle", [
    ("gpu-lost", "gpu-count", "fail", "gpu-not-usable",
     "GPU 3 not usable: gpu_lost"),
    ("gpu-pci8-nvml7", "gpu-count", "fail", "pci-nvml-mismatch",
     "8 NVIDIA GPU(s) on PCI but NVML sees 7"),
    ("gpu-count-no-gpu", "gpu-count", "fail", "no-gpu",
     "NVML sees 0 and none on PCI"),
    ("gpu-count-pci-unavailable", "gpu-count", "warn", "pci-unavailable",
     "NVML sees 8 GPU(s); PCI inventory not available"),
    ("gpu-count-count-not-expected", "gpu-count", "fail", "count-not-expected",
     "8 usable GPU(s), config expects 16"),
])
def test_each_code_on_its_bundle(name, check_id, status, code, needle):
    code_on(name, check_id, status, code, needle)


def test_expected_gpus_from_the_config(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("expected_gpus: 16\n")
    _, checks, _ = results("gpu-h100-snapshot-only", config=config)
    assert checks["gpu-count"]["status"] == "fail"
    assert "8 usable GPU(s), config expects 16" in checks["gpu-count"]["summary"]
