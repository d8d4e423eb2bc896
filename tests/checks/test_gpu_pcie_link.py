"""gpu-pcie-link (checks/gpu/gpu_pcie_link.py) on fixture bundles: each way it fails, by its failure code.
Rows and tests moved from tests/checks/test_gpu_checks.py keep their names and asserts
(the asserts of test_each_failure: tests/checks/gpu_support.py each_failure)."""
import pytest

from tests.checks.gpu_support import code_on, each_failure, results


@pytest.mark.parametrize("name, check_id, status, gpu, needle", [
    ("gpu-pcie-x8", "gpu-pcie-link", "fail", 1, "PCIe link x8 of x16"),
])
def test_each_failure(name, check_id, status, gpu, needle):
    each_failure(name, check_id, status, gpu, needle)


# Every declared code on a bundle that produces it (the contract test asks for one; here
# the summary and the fix are held too). Needles are facts of the scenario files.
@pytest.mark.parametrize("name, check_id, status, code, needle", [
    ("gpu-pcie-x8", "gpu-pcie-link", "fail", "link-width-below-max",
     "PCIe link x8 of x16"),
    ("gpu-pcie-link-field-unreadable", "gpu-pcie-link", "unknown", "field-unreadable",
     "GPU 0 (00000000:1A:00.0) pcie: nvml_error"),
    ("gpu-pcie-link-snapshot-malformed", "gpu-pcie-link", "unknown", "snapshot-malformed",
     "gpus[0].pcie.width_current is a number, expected an integer"),
])
def test_each_code_on_its_bundle(name, check_id, status, code, needle):
    code_on(name, check_id, status, code, needle)


def test_warnings_close_the_gate_only_with_strict():
    rc, checks, doc = results("gpu-pcie-x8", extra=["--strict"])
    assert rc == 1 and doc["gate"]["blocking"] == ["gpu-pcie-link"]


def test_a_lower_generation_at_idle_is_reported_but_not_a_fault():
    _, checks, _ = results("gpu-pcie-x8")
    assert checks["gpu-pcie-link"]["details"]["gen_downshifted_gpus"] == [2]
    assert "GPU 2" not in checks["gpu-pcie-link"]["summary"]  # only GPU 1's width is a fault
