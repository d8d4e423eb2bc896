"""Events on verdict transitions (core/v1, namespace `default`, involvedObject the Node), their
rate limit, a refused Event never blocking the verdict; and the hints by cause when the Node
cannot be read (anonymous, wrong name with the identity from the certificate's CN, not
registered yet with a certificate)."""
import pytest

from agent.outputs.node.events import EVENT_BURST
from tests.kube_double import KubeDouble, kubeconfig_yaml
from tests.kube_reports import report
from tests.kube_setup import NODE, Clock, make_publisher, serve_node


@pytest.fixture
def api(tmp_path):
    yield from serve_node(tmp_path)


def publisher(kc, clock, **kube):
    return make_publisher(kc, clock, consecutive_opens=1, **kube)


def test_open_closed_transitions_are_events_on_the_node(api):
    double, kc = api
    clock = Clock()
    pub = publisher(kc, clock)
    pub.publish(report())  # first verdict: not a transition, no Event
    assert double.events == []
    clock.t += 60
    pub.publish(report({"gpu-ecc": "GPU 0: DBE"}))
    clock.t += 60
    pub.publish(report())
    assert [(e["type"], e["reason"]) for e in double.events] == [
        ("Warning", "GPUGateClosed"), ("Normal", "GPUGateOpen")]
    closed = double.events[0]
    assert closed["metadata"]["namespace"] == "default"
    assert closed["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": NODE,
                                        "uid": f"uid-{NODE}"}
    assert closed["message"] == "CheckFailed: gpu-ecc fail: GPU 0: DBE"
    assert closed["source"] == {"component": "gpu-node-agent", "host": NODE}


def test_cordon_and_uncordon_are_events(api):
    double, kc = api
    clock = Clock()
    pub = publisher(kc, clock, cordon_on_fatal=True)
    pub.publish(report())
    clock.t += 60
    pub.publish(report({"gpu-xid": "XID 79"}))
    clock.t += 60
    pub.publish(report())
    reasons = [e["reason"] for e in double.events]
    assert reasons == ["GPUGateClosed", "GPUFaultCordon", "GPUGateOpen", "GPUFaultUncordon"]


def test_a_refused_event_is_reported_and_blocks_nothing(api):
    double, kc = api
    double.event_answer = 403
    clock = Clock()
    pub = publisher(kc, clock)
    pub.publish(report())
    clock.t += 60
    res = pub.publish(report({"gpu-ecc": "DBE"}))
    assert res.error is None and res.fully_written  # the verdict is written
    event = [o for o in res.outcomes if o.write == "event"]
    assert [(o.ok, o.code, o.reason) for o in event] == [(False, 403, "GPUGateClosed")]
    assert double.nodes[NODE]["metadata"]["labels"]["workload.example.com/gpu-healthy"] == "false"


def test_events_are_rate_limited_like_client_go(api):
    double, kc = api
    clock = Clock()
    pub = publisher(kc, clock)
    pub.publish(report())
    for i in range(65):  # a flapping host: a transition every 10 s, the last at +650 s
        clock.t += 10
        pub.publish(report({"gpu-ecc": "DBE"}) if i % 2 == 0 else report())
    # the burst of 25, then one per 300 s: +2 by 650 s
    assert len(double.events) == EVENT_BURST + 2
    clock.t += 300  # +950 s: a third refill
    pub.publish(report())
    assert len(double.events) == EVENT_BURST + 3


def test_403_for_system_anonymous_says_the_credentials_did_not_reach_the_server(api):
    double, kc = api
    double.inject(403, method="GET", message='nodes "gpu-host-1" is forbidden: User '
                  '"system:anonymous" cannot get resource "nodes" in API group "" at the cluster '
                  "scope")
    res = publisher(kc, Clock()).publish(report())
    assert "the server saw no credentials (system:anonymous)" in res.error
    assert "bearer token did not reach it" in res.error


def cert_kubeconfig(double, tmp_path, node):
    cert, key, _, _ = double.client_cert(node)
    kc = tmp_path / f"kc-{node}"
    kc.write_text(kubeconfig_yaml(double.url, double.ca.path,
                                  {"client-certificate": cert, "client-key": key}))
    return str(kc)


def test_wrong_name_with_a_certificate_names_its_cn(api, tmp_path):
    double, _ = api
    kc = cert_kubeconfig(double, tmp_path, NODE)
    res = publisher(kc, Clock(), node_name="gpu-host-2").publish(report())
    assert "cannot read Node 'gpu-host-2' (name from config kube.node_name): HTTP 403" in res.error
    assert "the credentials are system:node:gpu-host-1 (from the client certificate's CN)" in (
        res.error)
    assert [e["method"] for e in double.log] == ["GET"]  # the CN is read locally: no review


def test_not_registered_yet_with_a_certificate(api, tmp_path):
    double, _ = api
    kc = cert_kubeconfig(double, tmp_path, "gpu-host-3")
    res = publisher(kc, Clock(), node_name="gpu-host-3").publish(report())
    assert res.error is None
    assert res.waiting.startswith("Node 'gpu-host-3' is not registered yet")


def test_401_for_a_certificate_from_an_untrusted_ca_names_the_certificate(tmp_path):
    from tests.kube_certs import CA

    (tmp_path / "rogue").mkdir()
    rogue = CA(str(tmp_path / "rogue"), name="rogue-ca")
    double = KubeDouble(str(tmp_path))
    double.tls_accept_ca(rogue.path)  # TLS completes, as on the real server; then 401
    double.start()
    try:
        double.add_node(NODE)
        cert, key, _, _ = rogue.issue(f"system:node:{NODE}", org="system:nodes")
        kc = tmp_path / "kc"
        kc.write_text(kubeconfig_yaml(double.url, double.ca.path,
                                      {"client-certificate": cert, "client-key": key}))
        res = publisher(str(kc), Clock()).publish(report())
        assert "HTTP 401" in res.error
        assert f"the server rejected the credentials: client certificate {cert}" in res.error
    finally:
        double.stop()
