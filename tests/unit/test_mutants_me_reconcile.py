"""reconcile.plan (agent/outputs/node/reconcile.py): the unhealthy-GPU annotation is written only
when its value changes (a Node that already carries the list gets no patch for it), and only a
cordon decision makes the Node patch conditional on the resourceVersion read (a label change
alone is a plain merge patch, Plan.conditional False). Expected values by hand from the
module's docstring rules."""
from agent.model import ALL_PATHS, CheckResult, Severity, Status
from agent.outputs.node.reconcile import plan, rfc3339
from agent.report import build_report
from tests.kube_reports import config, report
from tests.unit.test_kube_reconcile import T0, applied, node

ANN = "gpu-node-agent.workload.example.com/unhealthy-gpus"
HEALTH = "workload.example.com/gpu-healthy"


def _uuid(i: int) -> str:
    return f"GPU-00000000-0000-4000-8000-{i:012d}"


def _gpu5_down():
    """gpu-xid failing on GPU 5 of 8 (a fatal XID the device plugin fences), min 7 healthy:
    the gate stays open on device-plugin and the annotation lists GPU 5."""
    snap = {"schema_version": 1, "source": "nvml", "error": None, "device_count": 8,
            "gpus": [{"index": i, "uuid": _uuid(i)} for i in range(8)]}
    xid = CheckResult(id="gpu-xid", title="gpu-xid", severity=Severity.CRITICAL,
                      status=Status.FAIL, summary="GPU 5: XID 79", remediation="-",
                      gates=ALL_PATHS, details={"gpus_at_fault": [{"index": 5, "uuid": _uuid(5)}]},
                      duration_s=0.0)
    return build_report([xid], "device-plugin", False, "h", 0.0, "t", gpus=snap,
                        min_healthy_gpus=7)


def test_an_annotation_already_listing_the_unhealthy_gpus_is_not_written_again():
    cfg = config(consecutive_opens=1).kube
    rep = _gpu5_down()
    first = plan(rep, node(), cfg, 1, T0)
    assert first.node_patch["metadata"]["annotations"][ANN] == _uuid(5)
    n = applied(node(), first)
    again = plan(rep, n, cfg, 2, T0 + 10)
    assert again.node_patch == {}
    assert not again.writes


def test_a_label_change_without_a_cordon_is_not_conditional():
    cfg = config(consecutive_opens=1).kube
    p = plan(report({"driver-loaded": "module not loaded"}), node(rv="42"), cfg, 0, T0)
    assert p.node_patch["metadata"]["labels"][HEALTH] == "false"
    assert "resourceVersion" not in p.node_patch["metadata"]
    assert p.conditional is False


def test_a_cordon_is_conditional_on_the_resource_version_read():
    cfg = config(consecutive_opens=1, cordon_on_fatal=True).kube
    p = plan(report({"gpu-xid": "GPU 0: XID 79"}), node(rv="42"), cfg, 0, T0)
    assert p.node_patch["spec"] == {"unschedulable": True}
    assert p.node_patch["metadata"]["resourceVersion"] == "42"
    assert p.conditional is True


CORDONED = "gpu-node-agent.workload.example.com/cordoned"
SOMEONE_ELSE = "node already cordoned by someone else: left as it is"


def test_the_cordon_annotation_names_every_fatal_check_in_config_order():
    # kube.fatal_checks defaults to gpu-xid, gpu-ecc, gpu-row-remap (agent/config_sections.py)
    cfg = config(consecutive_opens=1, cordon_on_fatal=True).kube
    p = plan(report({"gpu-ecc": "GPU 1: ECC", "gpu-xid": "GPU 0: XID 79"}), node(), cfg, 0, T0)
    assert p.node_patch["metadata"]["annotations"][CORDONED] == "gpu-xid,gpu-ecc"


def test_undoing_our_own_cordon_is_conditional_on_the_resource_version_read():
    cfg = config(consecutive_opens=1, cordon_on_fatal=True).kube
    n = node(annotations={CORDONED: "gpu-xid"}, rv="42", unschedulable=True)
    p = plan(report(), n, cfg, 1, T0)
    assert p.node_patch["spec"] == {"unschedulable": None}
    assert p.node_patch["metadata"]["annotations"][CORDONED] is None
    assert p.node_patch["metadata"]["resourceVersion"] == "42"
    assert p.conditional is True


def test_someone_elses_cordon_is_noted_only_when_we_would_have_cordoned():
    on = config(consecutive_opens=1, cordon_on_fatal=True).kube
    off = config(consecutive_opens=1, cordon_on_fatal=False).kube
    fatal = report({"gpu-xid": "GPU 0: XID 79"})
    admin = node(unschedulable=True)
    assert SOMEONE_ELSE in plan(fatal, admin, on, 0, T0).notes
    # cordon_on_fatal off: nothing to say about a cordon
    assert SOMEONE_ELSE not in plan(fatal, admin, off, 0, T0).notes
    # healthy, cordoned by an admin: not our business
    assert SOMEONE_ELSE not in plan(report(), node(unschedulable=True), on, 1, T0).notes
    # healthy and schedulable: nothing noted at all
    assert plan(report(), node(), on, 1, T0).notes == []


def test_a_condition_without_a_transition_time_gets_this_runs_stamp():
    # The same status as before (no transition), but the stored condition lacks
    # lastTransitionTime (written by someone else): the plan stamps it now, never null.
    cfg = config(consecutive_opens=1).kube
    old = {"type": "GPUReady", "status": "True", "reason": "GateOpen",
           "message": "gate dra open: no critical check fails"}
    p = plan(report(), node(conditions=[old]), cfg, 1, T0)
    assert p.condition["lastTransitionTime"] == rfc3339(T0)


def _steady(interval=300):
    """A Node the plan at T0 has converged (labels, annotation, condition with its heartbeat)."""
    cfg = config(consecutive_opens=1, heartbeat_interval=interval).kube
    first = plan(report(), node(), cfg, 1, T0)
    return cfg, applied(node(), first)


def test_the_heartbeat_is_due_when_this_process_last_wrote_it_an_interval_ago():
    cfg, n = _steady(300)
    due = plan(report(), n, cfg, 2, T0 + 5, since_beat=300.0)  # exactly the interval
    (cond,) = due.status_patch["status"]["conditions"]
    assert cond["lastHeartbeatTime"] == rfc3339(T0 + 5)
    early = plan(report(), n, cfg, 2, T0 + 5, since_beat=299.0)
    assert early.status_patch == {}


def test_a_heartbeat_written_this_second_is_not_due_and_is_kept():
    cfg, n = _steady(300)
    p = plan(report(), n, cfg, 2, T0)  # now - beat == 0: within the interval
    assert p.status_patch == {}
    assert p.condition["lastHeartbeatTime"] == rfc3339(T0)
    later = plan(report(), n, cfg, 2, T0 + 120)
    assert later.status_patch == {} and later.condition["lastHeartbeatTime"] == rfc3339(T0)
