"""reconcile.plan: each rule, on Node objects as the API returns them (no I/O)."""
import json

from agent.outputs.node.reconcile import plan, rfc3339
from tests.kube_reports import config, report

ALLOC = "workload.example.com/gpu-allocation"
HEALTH = "workload.example.com/gpu-healthy"
OWNED = "gpu-node-agent.workload.example.com/managed"
CORDONED = "gpu-node-agent.workload.example.com/cordoned"
T0 = 1_800_000_000.0


def node(labels=None, annotations=None, conditions=None, rv="7", **spec):
    return {"metadata": {"name": "gpu-host-1", "resourceVersion": rv, "labels": dict(labels or {}),
                         "annotations": dict(annotations or {})},
            "spec": dict(spec), "status": {"conditions": list(conditions or [])}}


def applied(n, p):
    """The Node after the plan's patches (labels/annotations/condition only)."""
    meta = n["metadata"]
    for k, v in ((p.node_patch.get("metadata") or {}).get("labels") or {}).items():
        meta["labels"].pop(k, None) if v is None else meta["labels"].__setitem__(k, v)
    for k, v in ((p.node_patch.get("metadata") or {}).get("annotations") or {}).items():
        meta["annotations"].pop(k, None) if v is None else meta["annotations"].__setitem__(k, v)
    if "spec" in p.node_patch:
        n["spec"].update({k: v for k, v in p.node_patch["spec"].items() if v is not None})
        for k, v in p.node_patch["spec"].items():
            if v is None:
                n["spec"].pop(k, None)
    for c in (p.status_patch.get("status") or {}).get("conditions") or []:
        conds = [x for x in n["status"]["conditions"] if x["type"] != c["type"]]
        if c.get("$patch") != "delete":
            conds.append(c)
        n["status"]["conditions"] = conds
    return n


def converge(cfg, rep, n, opens, now):
    p = plan(rep, n, cfg.kube, opens, now)
    return applied(n, p), p


def test_allocation_label_waits_for_n_consecutive_open_gates():
    cfg, n = config(consecutive_opens=3), node()
    for opens in (1, 2):
        n, p = converge(cfg, report(), n, opens, T0 + opens)
        assert ALLOC not in n["metadata"]["labels"]
        assert any("pending" in note for note in p.notes)
    n, _ = converge(cfg, report(), n, 3, T0 + 3)
    assert n["metadata"]["labels"][ALLOC] == "dra"
    assert n["metadata"]["labels"][HEALTH] == "true"


def test_steady_state_writes_nothing_until_the_heartbeat_is_due():
    cfg, n = config(consecutive_opens=1, heartbeat_interval=300), node()
    n, first = converge(cfg, report(), n, 1, T0)
    assert first.node_patch and first.status_patch
    for dt in (30, 60, 299):
        p = plan(report(), n, cfg.kube, 2, T0 + dt)
        assert not p.writes, (dt, p.node_patch, p.status_patch)
    p = plan(report(), n, cfg.kube, 12, T0 + 300)
    assert not p.node_patch
    (cond,) = p.status_patch["status"]["conditions"]
    assert cond["lastHeartbeatTime"] == rfc3339(T0 + 300)
    assert cond["lastTransitionTime"] == rfc3339(T0)  # no transition: stays


def test_gpu_ecc_failure_flips_health_and_condition_but_keeps_allocation_label():
    cfg, n = config(consecutive_opens=1), node()
    n, _ = converge(cfg, report(), n, 1, T0)
    bad = report({"gpu-ecc": "GPU 3: 2 volatile uncorrectable ECC errors"})
    n, p = converge(cfg, bad, n, 0, T0 + 60)
    assert n["metadata"]["labels"][ALLOC] == "dra"
    assert n["metadata"]["labels"][HEALTH] == "false"
    cond = next(c for c in n["status"]["conditions"] if c["type"] == "GPUReady")
    assert (cond["status"], cond["reason"]) == ("False", "CheckFailed")
    assert cond["message"] == "gpu-ecc fail: GPU 3: 2 volatile uncorrectable ECC errors"
    assert cond["lastTransitionTime"] == rfc3339(T0 + 60)
    assert "taints" not in json.dumps(p.node_patch)


def test_remove_on_failure_still_keeps_the_label_while_gpus_are_in_use_or_unknown():
    cfg = config(consecutive_opens=1, remove_allocation_label_on_failure=True)
    n, _ = converge(cfg, report(), node(), 1, T0)
    for in_use in ({"dra_claims": 2, "device_plugin_pods": 0}, None):
        n2, p = converge(cfg, report({"gpu-xid": "XID 79"}, in_use=in_use), json.loads(json.dumps(n)), 0, T0 + 5)
        assert n2["metadata"]["labels"][ALLOC] == "dra", in_use
        assert any("kept" in note for note in p.notes)
    n3, _ = converge(cfg, report({"gpu-xid": "XID 79"}, in_use={"dra_claims": 0, "device_plugin_pods": 0}),
                     n, 0, T0 + 5)
    assert ALLOC not in n3["metadata"]["labels"]


def test_condition_reason_is_camelcase_and_transition_time_is_stable():
    cfg, n = config(), node()
    bad = report({"driver-loaded": "module not loaded", "gpu-ecc": "DBE"})
    n, _ = converge(cfg, bad, n, 0, T0)
    n, _ = converge(cfg, bad, n, 0, T0 + 400)  # heartbeat only
    cond = next(c for c in n["status"]["conditions"] if c["type"] == "GPUReady")
    assert cond["reason"] == "CheckFailed"
    # the first blocking check, then how many others (the full list is in the JSON)
    assert cond["message"] == "driver-loaded fail: module not loaded; +1 more blocking"
    assert cond["lastTransitionTime"] == rfc3339(T0)
    assert cond["lastHeartbeatTime"] == rfc3339(T0 + 400)


def test_cordon_is_opt_in_and_undone_only_when_this_agent_set_it():
    fatal = report({"gpu-xid": "XID 79: GPU fell off the bus"})
    p = plan(fatal, node(), config().kube, 0, T0)
    assert "spec" not in p.node_patch  # off by default
    cfg = config(cordon_on_fatal=True)
    n, p = converge(cfg, fatal, node(), 0, T0)
    assert n["spec"]["unschedulable"] is True and n["metadata"]["annotations"][CORDONED] == "gpu-xid"
    assert p.node_patch["metadata"]["resourceVersion"] == "7"  # conditional write
    n, _ = converge(cfg, report(), n, 1, T0 + 60)
    assert "unschedulable" not in n["spec"] and CORDONED not in n["metadata"]["annotations"]
    # someone else's cordon is never undone, nor claimed
    theirs = node(unschedulable=True)
    n, p = converge(cfg, fatal, theirs, 0, T0)
    assert n["spec"]["unschedulable"] is True and CORDONED not in n["metadata"]["annotations"]
    n, p = converge(cfg, report(), n, 1, T0 + 60)
    assert n["spec"]["unschedulable"] is True and "spec" not in p.node_patch


def test_labels_and_conditions_no_longer_managed_are_removed_only_if_ours():
    old = config(consecutive_opens=1, health_label="old.example.com/healthy", condition_type="OldGPU")
    n, _ = converge(old, report(), node(labels={"team": "ml"}), 1, T0)
    assert n["metadata"]["labels"]["old.example.com/healthy"] == "true"
    new = config(consecutive_opens=1)
    n, p = converge(new, report(), n, 2, T0 + 10)
    assert "old.example.com/healthy" not in n["metadata"]["labels"]
    assert n["metadata"]["labels"]["team"] == "ml"  # never ours
    types = [c["type"] for c in n["status"]["conditions"]]
    assert "OldGPU" not in types and "GPUReady" in types
    assert json.loads(n["metadata"]["annotations"][OWNED])["condition"] == "GPUReady"


def test_allocation_value_and_path():
    n, _ = converge(config(consecutive_opens=1), report(path="device-plugin"), node(), 1, T0)
    assert n["metadata"]["labels"][ALLOC] == "device-plugin"
    n, _ = converge(config(consecutive_opens=1, allocation_value="gpu"), report(), node(), 1, T0)
    assert n["metadata"]["labels"][ALLOC] == "gpu"


def test_gpu_use_unknown_from_allocation_owner_keeps_the_label():
    from agent.outputs.node.condition import gpus_in_use

    cfg = config(consecutive_opens=1, remove_allocation_label_on_failure=True)
    n, _ = converge(cfg, report(), node(), 1, T0)
    bad = report({"gpu-xid": "XID 79"}, in_use={"dra_claims": 0, "device_plugin_pods": 0})
    owner = bad.result("allocation-owner")
    # a checkpoint it could not read: allocation-owner says gpus_in_use None
    object.__setattr__(owner, "details", {"in_use": {**owner.details["in_use"], "gpus_in_use": None}})
    assert gpus_in_use(bad) is None
    n, p = converge(cfg, bad, n, 0, T0 + 5)
    assert n["metadata"]["labels"][ALLOC] == "dra" and any("unknown" in x for x in p.notes)


def test_config_refuses_label_keys_a_node_may_not_set():
    import pytest

    from agent.config import ConfigError, parse_config

    for key in ("node-restriction.kubernetes.io/gpu", "example.kubernetes.io/gpu", "bad key"):
        with pytest.raises(ConfigError, match="kube.health_label"):
            parse_config(f"kube: {{health_label: '{key}'}}", "config.yaml")
    assert parse_config("kube: {health_label: node.kubernetes.io/gpu}", "c").kube.health_label
