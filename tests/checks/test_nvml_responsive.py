"""nvml-responsive on fixture bundles (tests/fixtures/bundles/gpu-*): it owns every NVML-level
error in the snapshot (docs/gpu-snapshot.md, error.kind), and the GPU checks skip naming it.
Each bundle's gpus.json was read by the real worker from the simulated library
(tests/fixtures/families/gpu.py); expected values are facts of the scenario files."""

import pytest

from tests.checks.gpu_support import each_failure, results


# An NVML-level error names no GPU; every other GPU check skips naming nvml-responsive, and
# the gate closes (nvml-responsive is critical): tests/checks/gpu_support.py each_failure.
@pytest.mark.parametrize("name, status, needle", [
    ("gpu-driver-mismatch", "fail", "Driver/library version mismatch"),
    ("gpu-no-library", "fail", "libnvidia-ml.so.1 not found"),
    ("gpu-nvml-timeout", "fail", "driver unresponsive"),
    ("gpu-no-snapshot", "unknown", "GPU snapshot not captured"),
])
def test_each_failure(name, status, needle):
    each_failure(name, "nvml-responsive", status, None, needle)


@pytest.mark.parametrize("name, status, code, needle", [
    ("gpu-driver-mismatch", "fail", "driver-library-mismatch", "(NVML error 18)"),
    ("gpu-no-library", "fail", "library-not-found", "libnvidia-ml.so.1 not found"),
    ("gpu-nvml-timeout", "fail", "nvml-timeout", "driver unresponsive"),
    ("gpu-no-snapshot", "unknown", "snapshot-missing", "no gpus.json"),
    ("nvml-responsive-driver-not-loaded", "fail", "driver-not-loaded", "Driver Not Loaded"),
    ("nvml-responsive-no-permission", "fail", "no-permission", "insufficient permissions"),
    ("nvml-responsive-function-not-found", "fail", "function-not-found", "lacks a function"),
    ("nvml-responsive-gpu-lost", "fail", "gpu-lost", "fell off the bus"),
    ("nvml-responsive-worker-stuck", "fail", "worker-stuck", "pid 4242 is still alive"),
    ("nvml-responsive-nvml-failed", "fail", "nvml-failed", "NVML failed: nvml_error (Unknown Error)"),
    ("nvml-responsive-not-read", "unknown", "nvml-not-read", "NVML not read: worker_failed"),
    ("nvml-responsive-snapshot-malformed", "unknown", "snapshot-malformed", "device_count"),
    ("gpu-h100-snapshot-only", "pass", None, "8 GPU(s)"),
])
def test_each_nvml_error_kind_has_its_code(name, status, code, needle):
    _, checks, _ = results(name)
    got = checks["nvml-responsive"]
    assert (got["status"], got["code"]) == (status, code), got["summary"]
    assert needle in got["summary"]


def test_the_fix_comes_from_the_declared_failure():
    from checks.nvml_responsive import NVML_RESPONSIVE

    _, checks, _ = results("nvml-responsive-no-permission")
    assert checks["nvml-responsive"]["remediation"] == NVML_RESPONSIVE.failure("no-permission").fix
    assert "Run the agent as root" in checks["nvml-responsive"]["remediation"]
