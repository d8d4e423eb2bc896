"""The API double answers as a recorded kube-apiserver v1.34.9 (Node,RBAC + NodeRestriction)
answers system:node:gpu-host-1 (tests/fixtures/kube-apiserver/). Asserts the stored Node, not only codes."""
import pytest

from agent.kube.client import ApiError, KubeClient
from agent.kube.kubeconfig import load
from tests.kube_double import KubeDouble, kubeconfig_yaml


@pytest.fixture
def api(tmp_path):
    double = KubeDouble(str(tmp_path)).start()
    double.add_node("gpu-host-1", labels={"team": "ml"})
    double.add_node("gpu-host-2")
    double.add_runtimeclass("nvidia", "nvidia")
    cert, key, _, _ = double.client_cert("gpu-host-1")
    kc = tmp_path / "kubeconfig"
    kc.write_text(kubeconfig_yaml(double.url, double.ca.path,
                                  {"client-certificate": cert, "client-key": key}))
    client = KubeClient(load(str(kc)), timeout=5)
    yield double, client
    client.close()
    double.stop()


def forbidden(fn, *args):
    with pytest.raises(ApiError) as err:
        fn(*args)
    assert err.value.status == 403
    return err.value.message


def test_own_labels_merge_patch_200(api):
    double, client = api
    out = client.patch_node("gpu-host-1", {"metadata": {"labels": {"workload.example.com/gpu-healthy": "true"}}})
    stored = double.nodes["gpu-host-1"]["metadata"]["labels"]
    assert stored["workload.example.com/gpu-healthy"] == "true" and stored["team"] == "ml"
    assert out["metadata"]["resourceVersion"] == double.nodes["gpu-host-1"]["metadata"]["resourceVersion"]


def test_node_restriction_label_403(api):
    double, client = api
    before = dict(double.nodes["gpu-host-1"]["metadata"]["labels"])
    msg = forbidden(client.patch_node, "gpu-host-1",
                    {"metadata": {"labels": {"node-restriction.kubernetes.io/gpu": "true"}}})
    assert "is not allowed to modify labels: node-restriction.kubernetes.io/gpu" in msg
    assert double.nodes["gpu-host-1"]["metadata"]["labels"] == before


def test_other_node_labels_and_status_403(api):
    double, client = api
    msg = forbidden(client.patch_node, "gpu-host-2", {"metadata": {"labels": {"a": "b"}}})
    assert 'node "gpu-host-1" is not allowed to modify node "gpu-host-2"' in msg
    msg = forbidden(client.patch_node_status, "gpu-host-2",
                    {"status": {"conditions": [{"type": "GPUReady", "status": "True"}]}})
    assert 'node "gpu-host-1" is not allowed to modify node "gpu-host-2"' in msg
    assert "a" not in double.nodes["gpu-host-2"]["metadata"]["labels"]
    assert [c["type"] for c in double.nodes["gpu-host-2"]["status"]["conditions"]] == ["Ready"]


def test_get_other_node_403_list_self_by_field_selector_200(api):
    _, client = api
    forbidden(client.get_node, "gpu-host-2")
    listed = client.request("GET", "/api/v1/nodes", params={"fieldSelector": "metadata.name=gpu-host-1"})
    assert [n["metadata"]["name"] for n in listed["items"]] == ["gpu-host-1"]


def test_status_strategic_merge_adds_condition_merge_patch_replaces_list(api):
    double, client = api
    client.patch_node_status("gpu-host-1", {"status": {"conditions": [{"type": "GPUReady", "status": "True"}]}})
    # added first, as the real server does (tests/fixtures/kube-apiserver/, "SMP own status add
    # GPUReady")
    assert [c["type"] for c in double.nodes["gpu-host-1"]["status"]["conditions"]] == ["GPUReady", "Ready"]
    client.request("PATCH", "/api/v1/nodes/gpu-host-1/status",
                   {"status": {"conditions": [{"type": "GPUReady", "status": "False"}]}},
                   "application/merge-patch+json")
    assert double.nodes["gpu-host-1"]["status"]["conditions"] == [{"type": "GPUReady", "status": "False"}]


def test_status_in_a_patch_of_the_main_object_is_silently_dropped(api):
    double, client = api
    out = client.patch_node("gpu-host-1", {"metadata": {"labels": {"x": "y"}},
                                           "status": {"conditions": [{"type": "GPUReady", "status": "True"}]}})
    assert [c["type"] for c in out["status"]["conditions"]] == ["Ready"]
    assert double.nodes["gpu-host-1"]["metadata"]["labels"]["x"] == "y"


def test_taints_403_unschedulable_200(api):
    double, client = api
    taint = {"key": "nvidia.com/gpu", "effect": "NoSchedule"}
    msg = forbidden(client.patch_node, "gpu-host-1", {"spec": {"taints": [taint]}})
    assert "is not allowed to modify taints" in msg
    assert "taints" not in double.nodes["gpu-host-1"]["spec"]
    client.patch_node("gpu-host-1", {"spec": {"unschedulable": True}})
    assert double.nodes["gpu-host-1"]["spec"]["unschedulable"] is True


def test_taint_removal_is_403_too(api, tmp_path):
    double, client = api
    double.nodes["gpu-host-1"]["spec"]["taints"] = [{"key": "k", "effect": "NoSchedule"}]
    msg = forbidden(client.patch_node, "gpu-host-1", {"spec": {"taints": None}})
    assert "is not allowed to modify taints" in msg
    assert double.nodes["gpu-host-1"]["spec"]["taints"]


def test_runtimeclasses_get_list_200_create_403(api):
    _, client = api
    assert [i["handler"] for i in client.list_runtimeclasses()["items"]] == ["nvidia"]
    assert client.request("GET", "/apis/node.k8s.io/v1/runtimeclasses/nvidia")["handler"] == "nvidia"
    msg = forbidden(client.request, "POST", "/apis/node.k8s.io/v1/runtimeclasses",
                    {"metadata": {"name": "x"}, "handler": "x"})
    assert 'cannot create resource "runtimeclasses"' in msg


def test_resource_version_precondition_409(api):
    double, client = api
    with pytest.raises(ApiError) as err:
        client.patch_node("gpu-host-1", {"metadata": {"resourceVersion": "1", "labels": {"a": "b"}}})
    assert err.value.status == 409 and "the object has been modified" in err.value.message
    assert "a" not in double.nodes["gpu-host-1"]["metadata"]["labels"]


def test_double_counts_requests(api):
    double, client = api
    client.get_node("gpu-host-1")
    client.patch_node_status("gpu-host-1", {"status": {"conditions": [{"type": "X", "status": "True"}]}})
    assert double.counts() == {"GET": 1, "PATCH status": 1}
