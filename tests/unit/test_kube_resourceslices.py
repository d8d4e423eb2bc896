"""The `resourceslices` host fact: KubeClient.list_resourceslices with the field selector the
Node authorizer requires of a node identity, the fact (cached, an error as a value), the API
double's answers (no real exchange for ResourceSlices was recorded: tests/kube_double.py says
so), and `collect` recording the fact in host.json for the check that declares it.

Expected values are written from the Kubernetes sources, not from the code under test:
kubernetes plugin/pkg/auth/authorizer/node/node_authorizer.go authorizeResourceSlice (a node
may list only with spec.nodeName=<itself>; otherwise "can only list/watch/deletecollection
resourceslices with nodeName field selector"), the API reference for ResourceSliceList."""
import json

import pytest

from agent.host.collect import collect
from agent.host.seam import Host
from agent.kube.client import ApiError, KubeClient
from agent.kube.facts import KubeFacts, with_kube_facts
from agent.kube.kubeconfig import load
from agent.model import FACT_NAMES
from checks.allocation.gpu_capacity import GPU_CAPACITY
from tests.kube_double import KubeDouble, kubeconfig_yaml
from tests.kube_reports import config

NODE = "gpu-host-1"
OTHER = "gpu-host-2"
UUIDS = ["GPU-11111111-0000-4000-8000-000000000000", "GPU-22222222-0000-4000-8000-000000000000"]
DENIED_REASON = ("can only list/watch/deletecollection resourceslices with nodeName field "
                 "selector")


@pytest.fixture
def api(tmp_path):
    double = KubeDouble(str(tmp_path)).start()
    double.add_node(NODE)
    double.add_node(OTHER)
    double.add_resourceslice(NODE, UUIDS)
    double.add_resourceslice(OTHER, ["GPU-99999999-0000-4000-8000-000000000000"])
    double.add_token("node-token", f"system:node:{NODE}")
    kc = tmp_path / "kubeconfig"
    kc.write_text(kubeconfig_yaml(double.url, double.ca.path, {"token": "node-token"}))
    yield double, str(kc)
    double.stop()


def client(kc):
    return KubeClient(load(kc), timeout=5)


def test_client_lists_its_own_slices_with_the_field_selector(api):
    double, kc = api
    c = client(kc)
    try:
        answer = c.list_resourceslices(NODE)
    finally:
        c.close()
    assert answer["kind"] == "ResourceSliceList" and answer["apiVersion"] == "resource.k8s.io/v1"
    assert isinstance(answer["metadata"]["resourceVersion"], str)
    assert [s["spec"]["nodeName"] for s in answer["items"]] == [NODE]
    uuids = [d["attributes"]["uuid"]["string"] for d in answer["items"][0]["spec"]["devices"]]
    assert uuids == UUIDS
    sent = double.log[-1]
    assert sent["path"] == "/apis/resource.k8s.io/v1/resourceslices"
    assert sent["query"] == "fieldSelector=spec.nodeName%3Dgpu-host-1"


def test_double_refuses_a_node_without_the_selector_or_for_another_node(api):
    double, kc = api
    expected = (
        f'resourceslices.resource.k8s.io is forbidden: User "system:node:{NODE}" cannot list '
        'resource "resourceslices" in API group "resource.k8s.io" at the cluster scope: '
        f"{DENIED_REASON}")
    user, groups = f"system:node:{NODE}", ["system:nodes", "system:authenticated"]
    for query in ({}, {"fieldSelector": [f"spec.nodeName={OTHER}"]}):
        code, body = double.handle("GET", "/apis/resource.k8s.io/v1/resourceslices", query,
                                   user, groups, "", None)
        assert code == 403
        assert body == {"kind": "Status", "apiVersion": "v1", "metadata": {},
                        "status": "Failure", "message": expected, "reason": "Forbidden",
                        "details": {"group": "resource.k8s.io", "kind": "resourceslices"},
                        "code": 403}
    c = client(kc)
    try:
        for params in (None, {"fieldSelector": f"spec.nodeName={OTHER}"}):
            with pytest.raises(ApiError) as err:
                c.request("GET", "/apis/resource.k8s.io/v1/resourceslices", params=params)
            assert err.value.status == 403 and err.value.reason == "Forbidden"
            # the client bounds the message it keeps (agent/kube/errors.py sanitize)
            assert err.value.message.endswith("...")
            assert expected.startswith(err.value.message[:-3])
            assert err.value.details == {"group": "resource.k8s.io", "kind": "resourceslices"}
        # the client's own call to another node's slices is the same 403
        with pytest.raises(ApiError):
            c.list_resourceslices(OTHER)
    finally:
        c.close()


def test_fact_is_cached_per_ttl_and_names_the_node(api):
    double, kc = api
    now = [0.0]
    facts = KubeFacts(config(kubeconfig=kc, node_name=NODE), clock=lambda: now[0], ttl=600)
    first = facts.fact("resourceslices")
    assert first["node"] == NODE and len(first["items"]) == 1
    for _ in range(4):
        assert facts.fact("resourceslices") == first
    assert double.counts() == {"GET": 1}
    now[0] = 601
    facts.fact("resourceslices")
    assert double.counts() == {"GET": 2}
    facts.close()


def test_fact_errors_are_values(api):
    double, kc = api
    wrong = KubeFacts(config(kubeconfig=kc, node_name=OTHER))
    assert "HTTP 403" in wrong.fact("resourceslices")["error"]
    # the message is bounded for logs (agent/kube/errors.py sanitize); its start names the refusal
    assert "resourceslices.resource.k8s.io is forbidden" in wrong.fact("resourceslices")["error"]
    nameless = KubeFacts(config(kubeconfig=kc))
    assert "no node name" in nameless.fact("resourceslices")["error"]
    double.inject(200, body={"kind": "NodeList", "items": []})
    odd = KubeFacts(config(kubeconfig=kc, node_name=NODE))
    assert "not a ResourceSliceList" in odd.fact("resourceslices")["error"]
    off = KubeFacts(config(kubeconfig=kc, enabled=False))
    assert "kube.enabled is false" in off.fact("resourceslices")["error"]


def test_fact_name_is_known_to_the_core():
    assert "resourceslices" in FACT_NAMES
    assert "resourceslices" in GPU_CAPACITY.facts


def test_collect_records_the_fact_in_host_json(api, tmp_path):
    _, kc = api
    root = tmp_path / "root"
    (root / "proc/sys/kernel/random").mkdir(parents=True)
    (root / "proc/sys/kernel/random/boot_id").write_text("b0000000-0000-4000-8000-000000000000\n")
    api_facts = KubeFacts(config(kubeconfig=kc, node_name=NODE))
    host = with_kube_facts(Host(str(root), description="test root"), api_facts)
    out = collect(host, [GPU_CAPACITY], str(tmp_path / "bundle"))
    recorded = json.loads((out / "host.json").read_text())
    assert recorded["resourceslices"]["node"] == NODE
    devices = recorded["resourceslices"]["items"][0]["spec"]["devices"]
    assert [d["attributes"]["uuid"]["string"] for d in devices] == UUIDS
    assert recorded["node"]["metadata"]["name"] == NODE
    api_facts.close()
