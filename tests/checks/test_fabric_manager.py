"""fabric-manager (checks/gpu/fabric_manager.py) on fixture bundles: each way it fails, by its failure code.
Rows and tests moved from tests/checks/test_gpu_checks.py keep their names and asserts
(the asserts of test_each_failure: tests/checks/gpu_support.py each_failure)."""
import pytest

from tests.checks.gpu_support import code_on, each_failure, results


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


# The report's per-GPU health (agent/gpu_health.py, docs/json-output.md `gpus`): a
# fabric-not-completed verdict names its GPU in details.gpus_at_fault, so the JSON marks that
# GPU, and only it, unhealthy. Facts of the bundle gpu-fabric-in-progress (bundle.yaml: "GPU 4
# fabric in progress"; 8 GPUs; tests/nvml_sim/scenarios/fabric-in-progress.json's UUIDs and
# bus ids; nvidia-fabricmanager active).
GPU4 = {"index": 4, "uuid": "GPU-01000100-0000-0000-0000-000000000004",
        "pci_bus_id": "00000000:8A:00.0"}


def unhealthy(doc):
    return [{k: d[k] for k in ("index", "uuid", "pci_bus_id", "failing")}
            for d in doc["gpus"]["devices"] if not d["healthy"]]


@pytest.mark.parametrize("path", ["dra", "device-plugin"])
def test_the_gpu_not_joined_is_the_one_unhealthy_gpu(path):
    rc, checks, doc = results("gpu-fabric-in-progress", path=path)
    got = checks["fabric-manager"]
    assert (got["status"], got["code"]) == ("fail", "fabric-not-completed")
    assert got["details"]["gpus_at_fault"] == [GPU4]
    assert unhealthy(doc) == [dict(GPU4, failing=["fabric-manager"])]
    assert (doc["gpus"]["healthy"], doc["gpus"]["total"]) == (7, 8)
    # The gate is as before the GPU was named: fabric-manager is critical and fails.
    assert rc == 1 and doc["gate"]["open"] is False
    assert doc["gate"]["blocking"] == ["fabric-manager"]


def test_naming_the_gpu_does_not_let_min_healthy_gpus_open_the_gate(tmp_path):
    # Only the verdicts the device plugin fences itself (gpu-xid's fatal XIDs, gpu-count)
    # stop closing the gate at min_healthy_gpus: nothing keeps pods off a GPU that has not
    # joined the fabric, so 7 healthy of 8 against a minimum of 7 still closes it.
    cfg = tmp_path / "config.yaml"
    cfg.write_text("policy:\n  health:\n    min_healthy_gpus: 7\n")
    rc, _, doc = results("gpu-fabric-in-progress", path="device-plugin", config=cfg)
    assert unhealthy(doc) == [dict(GPU4, failing=["fabric-manager"])]
    assert rc == 1 and doc["gate"]["open"] is False
    assert doc["gate"]["blocking"] == ["fabric-manager"]


def test_every_gpu_joined_marks_none_unhealthy():
    rc, checks, doc = results("fabric-manager-gb200-completed")
    assert checks["fabric-manager"]["status"] == "pass"
    assert "gpus_at_fault" not in checks["fabric-manager"]["details"]
    assert unhealthy(doc) == [] and doc["gpus"]["healthy"] == doc["gpus"]["total"] == 4


def test_an_inactive_service_marks_no_gpu_unhealthy():
    # Every GPU not_started because the service is down: the verdict is the host's (the
    # service-inactive finding names no GPU), so no GPU is counted unhealthy for it.
    rc, checks, doc = results("fabric-manager-hgx-not-started")
    assert checks["fabric-manager"]["code"] == "service-inactive"
    assert "gpus_at_fault" not in checks["fabric-manager"]["details"]
    assert unhealthy(doc) == []
    assert rc == 1 and "fabric-manager" in doc["gate"]["blocking"]
