"""What the metrics say of the Node (gpu_node_agent_node_cordoned, node_publish_success,
node_publish_last_success_timestamp_seconds): the Publisher's ``facts`` after each attempt
against the HTTPS API double, the series rendered from them, and the daemon picking them up.

"Cordoned by us" is spec.unschedulable together with the `<annotation_prefix>/cordoned`
annotation, the pair agent/outputs/node/reconcile.py writes and removes together
(docs/kubernetes.md); the expected values below follow from that rule and the double's Node."""
import pytest
from prometheus_client.parser import text_string_to_metric_families

from agent.daemon.cycle import node_facts
from agent.outputs import metrics
from agent.outputs.node.result import cordoned_by_us
from agent.report import NodeFacts
from tests.kube_reports import report
from tests.kube_setup import NODE, T0, Clock, make_publisher, serve_node
from tests.unit.metrics_fixtures import CHECKS, run_report
from tests.unit.metrics_fixtures import report as metrics_report

PREFIX = "gpu-node-agent.workload.example.com"  # kube.annotation_prefix's default
XID79 = {"gpu-xid": "XID 79: fell off the bus"}  # gpu-xid is in kube.fatal_checks' default


@pytest.fixture
def api(tmp_path):
    yield from serve_node(tmp_path)


def node(double):
    return double.nodes[NODE]


def test_no_attempt_no_facts_then_cordon_then_uncordon(api):
    double, kc = api
    clock = Clock()
    pub = make_publisher(kc, clock, cordon_on_fatal=True)
    assert pub.facts is None  # nothing published yet: the series are absent
    pub.publish(report(XID79))
    assert node(double)["spec"]["unschedulable"] is True
    assert f"{PREFIX}/cordoned" in node(double)["metadata"]["annotations"]
    assert pub.facts == NodeFacts(cordoned=True, publish_ok=True, last_success=T0)
    clock.t += 60
    pub.publish(report())
    assert "unschedulable" not in node(double)["spec"]
    assert pub.facts == NodeFacts(cordoned=False, publish_ok=True, last_success=T0 + 60)


def test_a_refused_uncordon_keeps_the_cordon_and_flags_the_publish(api):
    double, kc = api
    clock = Clock()
    pub = make_publisher(kc, clock, cordon_on_fatal=True)
    pub.publish(report(XID79))
    assert pub.facts == NodeFacts(True, True, T0)
    # The uncordon PATCH fails: the Node stays cordoned by us, and the series says so,
    # with publish_success 0 and the last success's time unchanged.
    clock.t += 60
    double.inject(500, method="PATCH", message="etcd timeout")
    res = pub.publish(report())
    assert "HTTP 500" in res.error
    assert node(double)["spec"]["unschedulable"] is True
    assert pub.facts == NodeFacts(cordoned=True, publish_ok=False, last_success=T0)
    # Backing off (no request): the facts stay as they were.
    clock.t += 1
    assert pub.publish(report()).waiting
    assert pub.facts == NodeFacts(True, False, T0)
    # The re-read after the back-off fails too: no Node read, the cordon state as last known.
    clock.t += 600
    double.inject(503, method="GET")
    assert "HTTP 503" in pub.publish(report()).error
    assert pub.facts == NodeFacts(True, False, T0)
    # The API answers again: uncordoned, and a success at this time.
    clock.t += 601
    assert pub.publish(report()).error is None
    assert "unschedulable" not in node(double)["spec"]
    assert pub.facts == NodeFacts(False, True, T0 + 60 + 1 + 600 + 601)


def test_a_refused_cordon_reads_not_cordoned(api):
    double, kc = api
    clock = Clock()
    pub = make_publisher(kc, clock, cordon_on_fatal=True)
    double.inject(500, method="PATCH")
    pub.publish(report(XID79))
    assert "unschedulable" not in node(double)["spec"]
    # The Node as read: not cordoned (the write that would cordon it failed), and flagged.
    assert pub.facts == NodeFacts(cordoned=False, publish_ok=False, last_success=None)


def test_a_cordon_someone_else_made_is_not_ours(api):
    double, kc = api
    node(double)["spec"]["unschedulable"] = True  # `kubectl cordon` by an operator
    pub = make_publisher(kc, Clock(), cordon_on_fatal=True)
    res = pub.publish(report(XID79))
    assert "node already cordoned by someone else: left as it is" in res.plan.notes
    assert pub.facts == NodeFacts(cordoned=False, publish_ok=True, last_success=T0)


@pytest.mark.parametrize("shape", [
    None, [], {"spec": "x"}, {"spec": {"unschedulable": "true"}},
    {"spec": {"unschedulable": True}, "metadata": {"annotations": ["x"]}},
    {"spec": {"unschedulable": True}, "metadata": []},
])
def test_cordoned_by_us_tolerates_any_shape(shape):
    assert cordoned_by_us(shape, PREFIX) is False


def test_cordoned_by_us_needs_both_the_flag_and_our_annotation():
    ann = {"metadata": {"annotations": {f"{PREFIX}/cordoned": "gpu-xid"}}}
    assert cordoned_by_us(dict(ann, spec={"unschedulable": True}), PREFIX) is True
    assert cordoned_by_us(dict(ann, spec={}), PREFIX) is False
    assert cordoned_by_us(dict(ann, spec={"unschedulable": True}), "other.example.com") is False


def samples(facts):
    body = metrics.render(run_report(CHECKS, "1", "dra", report=metrics_report(), node=facts))
    return {s.name: s.value for fam in text_string_to_metric_families(body.decode())
            for s in fam.samples if s.name.startswith("gpu_node_agent_node_")}


def test_series_from_the_facts():
    assert samples(None) == {}  # no Node output, or no attempt yet
    assert samples(NodeFacts(True, True, 1234.5)) == {
        "gpu_node_agent_node_cordoned": 1.0,
        "gpu_node_agent_node_publish_success": 1.0,
        "gpu_node_agent_node_publish_last_success_timestamp_seconds": 1234.5,
    }
    # a first attempt whose read failed: nothing known of the cordon, the publish failed
    assert samples(NodeFacts(None, False, None)) == {
        "gpu_node_agent_node_publish_success": 0.0,
        "gpu_node_agent_node_publish_last_success_timestamp_seconds": 0.0,
    }
    assert samples(NodeFacts(False, False, 7.0))["gpu_node_agent_node_cordoned"] == 0.0


def test_the_daemon_takes_the_publishers_facts():
    class Other:  # the NFD file output, the metrics endpoint: no facts
        pass

    class Pub:
        facts = NodeFacts(True, False, 3.0)

    assert node_facts([]) is None
    assert node_facts([Other()]) is None
    assert node_facts([Other(), Pub()]) == NodeFacts(True, False, 3.0)
    Pub.facts = None  # a publisher that has not attempted yet
    assert node_facts([Pub()]) is None
