"""The GPUReady condition's reason and message for a closed gate (agent/outputs/node/condition.py
closed_reason/closed_message), with exact expected strings: written against the mutants the
mutation tier found surviving there (docs/testing.md)."""
from agent.model import Status
from agent.outputs.node.condition import (
    REASON_FAILED,
    REASON_UNKNOWN,
    closed_message,
    closed_reason,
)
from tests.kube_reports import report


class _Gate:
    def __init__(self, blocking):
        self.blocking = tuple(blocking)
        self.open = not blocking


class _Report:
    """A report whose gate names a check it has no result for (a hand-edited bundle)."""

    path = "dra"

    def __init__(self, blocking):
        self.gate = _Gate(blocking)

    def result(self, check_id):
        return None


def test_reason_is_unknown_only_when_every_blocking_check_is_unknown():
    assert closed_reason(report({"gpu-xid": "no kernel log"}, status=Status.UNKNOWN)) == REASON_UNKNOWN
    assert closed_reason(report({"gpu-xid": "XID 79", "gpu-ecc": "DBE"})) == REASON_FAILED
    assert closed_reason(_Report([])) == REASON_FAILED
    assert (REASON_FAILED, REASON_UNKNOWN) == ("CheckFailed", "CheckUnknown")


def test_message_names_the_first_blocking_check_and_counts_the_rest():
    rep = report({"driver-loaded": "module\nnot loaded", "gpu-ecc": "DBE"})
    assert closed_message(rep) == "driver-loaded fail: module not loaded; +1 more blocking"
    # head "gpu-ecc fail: " is 14 characters; 16 left: 13 of the summary and "..."
    cut = closed_message(report({"gpu-ecc": "x" * 50}), limit=30)
    assert cut == "gpu-ecc fail: " + "x" * 13 + "..." and len(cut) == 30


def test_message_without_a_result_or_without_blocking_checks():
    assert closed_message(_Report(["ghost"])) == "ghost: blocking"
    assert closed_message(_Report(["ghost", "other"])) == "ghost: blocking; +1 more blocking"
    assert closed_message(_Report([])) == "gate dra closed"


def test_message_cut_when_the_head_leaves_no_room():
    one = report({"gpu-ecc": "DBE"})
    assert closed_message(one, limit=10) == "gpu-ecc..."
    two = report({"driver-loaded": "x", "gpu-ecc": "DBE"})
    # the tail "; +1 more blocking" is 18 characters: 30 - 18 - 3 = 9 of the head
    assert closed_message(two, limit=30) == "driver-lo...; +1 more blocking"
    assert closed_message(two, limit=5) == "...; +1 more blocking"
    # a summary exactly as long as the room is not cut
    assert closed_message(report({"gpu-ecc": "y" * 16}), limit=30) == "gpu-ecc fail: " + "y" * 16


# -- gpus_in_use and the allocation-label notes -------------------------------------------------
def test_gpus_in_use_counts_claims_and_pods():
    from agent.outputs.node.condition import gpus_in_use

    assert gpus_in_use(report(in_use={"dra_claims": 2, "device_plugin_pods": 1})) == 3
    assert gpus_in_use(report(in_use={"dra_claims": 0, "device_plugin_pods": 2})) == 2
    assert gpus_in_use(report(in_use={"dra_claims": 0, "device_plugin_pods": 0})) == 0
    assert gpus_in_use(None) is None
    rep = report(in_use={"dra_claims": 1, "device_plugin_pods": 0})
    owner = rep.result("allocation-owner")
    in_use = owner.details["in_use"]
    # "in use" with no holder lists, or with lists of the wrong shape, is still one holder
    for shape in ({"gpus_in_use": True}, {"gpus_in_use": True, "dra": ["x"], "device_plugin": {}},
                  {"gpus_in_use": True, "dra": {}, "device_plugin": ["x"]}):
        object.__setattr__(owner, "details", {"in_use": shape})
        assert gpus_in_use(rep) == 1, shape
    object.__setattr__(owner, "details", {"in_use": in_use})
    assert gpus_in_use(rep) == 1


def test_allocation_label_notes_are_exact():
    import json

    from agent.outputs.node.reconcile import plan
    from tests.kube_reports import config

    alloc = "workload.example.com/gpu-allocation"
    node = {"metadata": {"name": "n", "labels": {alloc: "dra"}, "annotations": {}}, "spec": {},
            "status": {"conditions": []}}
    bad = report({"gpu-xid": "XID 79"})
    p = plan(bad, json.loads(json.dumps(node)), config(consecutive_opens=1).kube, 0, 1.8e9)
    assert p.labels[alloc] == "dra"
    assert f"{alloc} kept on a failure (remove_allocation_label_on_failure is false)" in p.notes
    cfg = config(consecutive_opens=1, remove_allocation_label_on_failure=True)
    p = plan(bad, json.loads(json.dumps(node)), cfg.kube, 0, 1.8e9)
    assert f"{alloc} kept: GPU use unknown" in p.notes
    p = plan(report({"gpu-xid": "XID 79"}, in_use={"dra_claims": 2, "device_plugin_pods": 0}),
             json.loads(json.dumps(node)), cfg.kube, 0, 1.8e9)
    assert f"{alloc} kept: 2 allocation(s) still hold GPUs" in p.notes


def test_renamed_labels_old_allocation_kept_old_health_removed_and_annotation_sorted():
    import json

    from agent.outputs.node.reconcile import plan
    from tests.kube_reports import config

    owned_key = "gpu-node-agent.workload.example.com/managed"
    old = {"allocation": "old.example.com/alloc", "health": "old.example.com/healthy",
           "condition": "GPUReady"}
    node = {"metadata": {"name": "n", "labels": {"old.example.com/alloc": "dra",
                                                 "old.example.com/healthy": "true"},
                         "annotations": {owned_key: json.dumps(old)}},
            "spec": {}, "status": {"conditions": []}}
    p = plan(report(in_use={"dra_claims": 1, "device_plugin_pods": 0}), node,
             config(consecutive_opens=1).kube, 1, 1.8e9)
    labels = p.node_patch["metadata"]["labels"]
    assert "old.example.com/alloc" not in labels and labels["old.example.com/healthy"] is None
    assert p.node_patch["metadata"]["annotations"][owned_key] == (
        '{"allocation":"workload.example.com/gpu-allocation","condition":"GPUReady",'
        '"health":"workload.example.com/gpu-healthy"}')


def test_owned_annotation_of_any_shape_is_treated_as_nothing_owned():
    from agent.outputs.node.reconcile import plan
    from tests.kube_reports import config

    owned_key = "gpu-node-agent.workload.example.com/managed"
    for raw in (5, "[1, 2]", "not json", ""):
        node = {"metadata": {"name": "n", "labels": {}, "annotations": {owned_key: raw}},
                "spec": {}, "status": {"conditions": []}}
        p = plan(report(), node, config(consecutive_opens=1).kube, 1, 1.8e9)
        assert p.labels["workload.example.com/gpu-allocation"] == "dra", raw


def test_rfc3339_is_utc_whatever_the_local_zone(monkeypatch):
    import time

    from agent.outputs.node.reconcile import rfc3339

    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        assert rfc3339(0) == "1970-01-01T00:00:00Z"
        assert rfc3339(1_800_000_000.9) == "2027-01-15T08:00:00Z"
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_reason_when_a_blocking_check_has_no_result():
    assert closed_reason(_Report(["ghost"])) == REASON_FAILED


def test_a_label_already_set_stays_while_a_reopened_gate_counts_its_runs():
    from agent.outputs.node.reconcile import plan
    from tests.kube_reports import config

    alloc = "workload.example.com/gpu-allocation"
    node = {"metadata": {"name": "n", "labels": {alloc: "dra"}, "annotations": {}}, "spec": {},
            "status": {"conditions": []}}
    p = plan(report(), node, config(consecutive_opens=3).kube, 1, 1.8e9)
    assert p.labels[alloc] == "dra"
    assert alloc not in ((p.node_patch.get("metadata") or {}).get("labels") or {})
