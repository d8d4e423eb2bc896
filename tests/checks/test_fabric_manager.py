"""fabric-manager (checks/gpu/fabric_manager.py) on fixture bundles: each way it fails, by its failure code.
Rows and tests moved from tests/checks/test_gpu_checks.py keep their names and asserts
(the asserts of test_each_failure: tests/checks/gpu_support.py each_failure)."""
import pytest

from tests.checks.gpu_support import code_on, each_failure


@pytest.mark.parametrize("name, check_id, status, gpu, needle", [
    ("gpu-fabric-in-progress", "fabric-manager", "fail", 4, "fabric state in_progress, status success"),
    ("gpu-fabricmanager-inactive", "fabric-manager", "fail", None, "nvidia-fabricmanager is inactive"),
    ("gpu-old-driver-no-fabric", "fabric-manager", "unknown", 0, "fabric: function_not_found"),
])
def test_each_failure(name, check_id, status, gpu, needle):
    each_failure(name, check_id, status, gpu, needle)


# Every declared code on a bundle that produces it (the contract test asks for one; here
# the summary and the fix are held too). Needles are facts of the scenario files.
@pytest.mark.parametrize("name, check_id, status, code, needle", [
    ("gpu-fabric-in-progress", "fabric-manager", "fail", "fabric-not-completed",
     "fabric state in_progress, status success"),
    ("gpu-fabricmanager-inactive", "fabric-manager", "fail", "service-inactive",
     "nvidia-fabricmanager is inactive"),
    ("gpu-old-driver-no-fabric", "fabric-manager", "unknown", "field-unreadable",
     "fabric: function_not_found"),
    ("fabric-manager-service-state-unknown", "fabric-manager", "unknown", "service-state-unknown",
     "`systemctl is-active nvidia-fabricmanager` not recorded for this host"),
    ("fabric-manager-snapshot-malformed", "fabric-manager", "unknown", "snapshot-malformed",
     "gpus[0].fabric.state is an integer, expected a string"),
])
def test_each_code_on_its_bundle(name, check_id, status, code, needle):
    code_on(name, check_id, status, code, needle)
