"""The GPUReady condition over every fixture bundle: a message `kubectl describe node` can show
(at most 200 characters, one line: the first blocking check, its summary cut to fit, how many
others), and a CamelCase reason: GateOpen, CheckFailed (a fail closes the gate) or CheckUnknown
(only unknowns do). Plus the reconcile fuzz: plan() never raises on arbitrary Node JSON."""
import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.outputs.node.condition import MESSAGE_LIMIT, closed_message
from agent.outputs.node.reconcile import plan
from tests.conftest import BUNDLES, run_cli
from tests.kube_reports import config, report

ALL_BUNDLES = sorted(p.name for p in BUNDLES.iterdir() if p.is_dir())
MORE = re.compile(r"; \+(\d+) more blocking$")


@pytest.fixture(scope="module")
def verdicts():
    out = {}
    for name in ALL_BUNDLES:
        res = run_cli(["check", "--bundle", str(BUNDLES / name), "--format", "json"])
        assert res.rc in (0, 1), (name, res.err)
        out[name] = res.json()
    return out


def test_every_bundle_is_covered(verdicts):
    assert len(verdicts) == len(ALL_BUNDLES) >= 90


@pytest.mark.parametrize("name", ALL_BUNDLES)
def test_condition_message_and_reason(verdicts, name):
    doc = verdicts[name]
    cond = doc["context"]["kube"]["condition"]
    message, blocking = cond["message"], doc["gate"]["blocking"]
    assert len(message) <= MESSAGE_LIMIT and "\n" not in message
    if doc["gate"]["open"]:
        assert (cond["status"], cond["reason"]) == ("True", "GateOpen")
        return
    statuses = {c["id"]: c["status"] for c in doc["checks"]}
    only_unknown = all(statuses[b] == "unknown" for b in blocking)
    assert cond["status"] == "False"
    assert cond["reason"] == ("CheckUnknown" if only_unknown else "CheckFailed")
    assert message.startswith(f"{blocking[0]} {statuses[blocking[0]]}: ")
    more = MORE.search(message)
    assert (int(more.group(1)) if more else 0) == len(blocking) - 1


def test_a_long_summary_is_cut_to_fit_and_the_count_kept():
    rep = report({"driver-loaded": "x" * 5000, "gpu-ecc": "y", "gpu-xid": "z"})
    msg = closed_message(rep)
    assert len(msg) == MESSAGE_LIMIT
    assert msg.startswith("driver-loaded fail: xxx") and msg.endswith("...; +2 more blocking")


def test_control_characters_do_not_reach_the_condition():
    msg = closed_message(report({"gpu-xid": "XID 79\n\x1b[31mfallen off the bus"}))
    assert msg == "gpu-xid fail: XID 79 [31mfallen off the bus"


# -- fuzz: reconcile never raises on arbitrary Node JSON -------------------------------------
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=30,
)
KEYS = st.sampled_from([
    "workload.example.com/gpu-allocation", "workload.example.com/gpu-healthy",
    "gpu-node-agent.workload.example.com/managed", "gpu-node-agent.workload.example.com/cordoned",
    "GPUReady", "lastHeartbeatTime", "lastTransitionTime", "status", "type", "x"])
CONDITION = st.dictionaries(st.sampled_from(["type", "status", "reason", "message",
                                             "lastHeartbeatTime", "lastTransitionTime"]),
                            st.sampled_from(["GPUReady", "True", "False", "0001-01-01T00:00:00Z",
                                             "9999-12-31T23:59:59Z", "2026-12-01T00:00:00+14:00",
                                             "not a time", ""]) | JSON)
NODE = st.fixed_dictionaries({}, optional={
    "metadata": st.fixed_dictionaries({}, optional={
        "labels": st.dictionaries(KEYS, JSON, max_size=4) | JSON,
        "annotations": st.dictionaries(KEYS, JSON | st.just('{"allocation": "a"}'), max_size=4)
        | JSON,
        "resourceVersion": JSON,
    }) | JSON,
    "spec": st.fixed_dictionaries({}, optional={"unschedulable": JSON}) | JSON,
    "status": st.fixed_dictionaries({}, optional={
        "conditions": st.lists(CONDITION | JSON, max_size=4) | JSON}) | JSON,
}) | JSON

REPORTS = [report(), report({"gpu-xid": "XID 79"}), report({"driver-loaded": "x"}, in_use={})]
CFG = config(consecutive_opens=1, cordon_on_fatal=True, remove_allocation_label_on_failure=True)


@settings(max_examples=300, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(node=NODE, which=st.integers(0, len(REPORTS) - 1), opens=st.integers(0, 5),
       since=st.none() | st.floats(allow_nan=True), now=st.floats(0, 4e9))
def test_plan_never_raises_on_arbitrary_node_json(node, which, opens, since, now):
    p = plan(REPORTS[which], node, CFG.kube, opens, now, since)
    json.dumps(p.node_patch), json.dumps(p.status_patch)  # what is sent is JSON
    assert len(p.condition["message"]) <= MESSAGE_LIMIT
