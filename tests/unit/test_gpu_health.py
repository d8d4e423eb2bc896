"""Per-GPU health and `health.min_healthy_gpus` (agent/gpu_health.py, agent/report.py, the
Node plan): the real checks over the 8-GPU bundles of tests/fixtures/families/gpu_health.py
(one GPU with a fatal XID; one GPU on PCI that NVML does not list), then each rule."""
import json
from pathlib import Path

import jsonschema
import pytest

from agent.cli import main, resolve_policy
from agent.config import Config
from agent.engine import Engine
from agent.gpu_health import min_healthy_of
from agent.host.build import open_host
from agent.model import ALL_PATHS, CheckResult, Severity, Status
from agent.outputs import metrics
from agent.outputs.node.condition import LISTED_MAX, unhealthy_gpus_value
from agent.outputs.node.reconcile import plan
from agent.outputs.render import report_dict
from agent.report import build_report
from agent.safeio.schema import ValidationError
from checks.gpu.gpu_count import GPU_COUNT
from checks.nvml_responsive import NVML_RESPONSIVE
from checks.policy import load_policy
from checks.xid.gpu_xid import GPU_XID
from tests.kube_reports import config as kube_config

REPO = Path(__file__).resolve().parents[2]
BUNDLES = REPO / "tests/fixtures/bundles"
FATAL = str(BUNDLES / "health-one-fatal-xid")
MISSING = str(BUNDLES / "health-one-missing-from-nvml")
# GPU 5 of the bundles (tests/fixtures/families/xid.py UUIDS[5], BUSES[5]).
GPU5 = "GPU-00000000-0000-4000-8000-000000000005"
SLOT_DB = "0000:db:00.0"  # the GPU the second bundle's NVML does not list (BUSES[7])
ANN = "gpu-node-agent.workload.example.com/unhealthy-gpus"
HEALTH = "workload.example.com/gpu-healthy"
ALLOC = "workload.example.com/gpu-allocation"
CORDONED = "gpu-node-agent.workload.example.com/cordoned"
CHECKS = [NVML_RESPONSIVE, GPU_COUNT, GPU_XID]


def _report(bundle, path="device-plugin", minimum=None, strict=False):
    """The real checks over ``bundle`` and the report `check` builds, with the policy's
    min_healthy_gpus (None: the default, "all")."""
    cfg = Config.model_validate(
        {"policy": {"health": {"min_healthy_gpus": minimum}}} if minimum is not None else {})
    policy = resolve_policy(cfg, None, path)
    with open_host(bundle=bundle) as host:
        results = Engine(CHECKS).run(host, policy)
        return build_report(results, path, strict, "h", 0.0, "t", gpus=host.gpus_if_fetched(),
                            min_healthy_gpus=min_healthy_of(policy))


def _node(annotations=None, **spec):
    return {"metadata": {"name": "n", "resourceVersion": "3", "labels": {},
                         "annotations": dict(annotations or {})},
            "spec": dict(spec), "status": {"conditions": []}}


def test_the_fatal_xid_names_gpu_5_and_the_default_closes_the_gate():
    rep = _report(FATAL)
    xid = rep.result("gpu-xid")
    assert xid.status == Status.FAIL and xid.code == "xid-needs-reset"
    assert [r["uuid"] for r in xid.details["gpus_at_fault"]] == [GPU5]
    assert not rep.gate.open and rep.gate.blocking == ("gpu-xid",)
    assert rep.health.healthy_count == 7 and len(rep.health.gpus) == 8
    assert [g.uuid for g in rep.health.unhealthy] == [GPU5]
    assert not rep.health.tolerated


def test_seven_keeps_the_gate_open_with_the_annotation_naming_gpu_5():
    rep = _report(FATAL, minimum=7)
    assert rep.gate.open and rep.gate.blocking == ()
    assert all(rep.gates[p].open for p in ("device-plugin", "operator-clusterpolicy"))
    p = plan(rep, _node(), kube_config().kube, 3, 1.0e9)
    assert p.node_patch["metadata"]["annotations"][ANN] == GPU5
    assert p.labels[HEALTH] == "true"
    assert p.condition["status"] == "True" and p.condition["reason"] == "GateOpen"
    assert p.condition["message"] == (
        f"gate device-plugin open: 7 of 8 GPUs healthy (min_healthy_gpus 7); unhealthy: {GPU5}")


def test_the_json_says_which_gpu_fails_which_check():
    doc = report_dict(_report(FATAL, minimum=7))
    gpus = doc["gpus"]
    assert (gpus["min_healthy_gpus"], gpus["required"], gpus["healthy"], gpus["total"]) == (
        7, 7, 7, 8)
    assert gpus["tolerated"] is True and gpus["advisory"] is False
    bad = [d for d in gpus["devices"] if not d["healthy"]]
    assert bad == [{"index": 5, "uuid": GPU5, "pci_bus_id": "00000000:BB:00.0", "in_nvml": True,
                    "healthy": False, "failing": ["gpu-xid"]}]
    assert json.loads(json.dumps(doc)) == doc


def test_one_series_per_gpu_says_whether_it_is_healthy():
    body = metrics.render(_report(FATAL, minimum=7)).decode()
    rows = [ln for ln in body.splitlines() if ln.startswith("gpu_node_agent_gpu_healthy{")]
    assert len(rows) == 8
    assert f'gpu_node_agent_gpu_healthy{{gpu="5",uuid="{GPU5}"}} 0' in rows
    assert ('gpu_node_agent_gpu_healthy{gpu="0",uuid="GPU-00000000-0000-4000-8000-000000000000"}'
            " 1") in rows


def test_a_gpu_on_pci_missing_from_nvml_counts_as_unhealthy():
    rep = _report(MISSING)
    count = rep.result("gpu-count")
    assert count.status == Status.FAIL and count.code == "pci-nvml-mismatch"
    assert count.details["gpus_at_fault"] == [{"pci_bus_id": SLOT_DB}]
    assert not rep.gate.open
    assert [(g.pci_bus_id, g.in_nvml) for g in rep.health.unhealthy] == [(SLOT_DB, False)]
    assert rep.health.healthy_count == 7 and len(rep.health.gpus) == 8
    assert _report(MISSING, minimum=7).gate.open
    assert not _report(MISSING, minimum=8).gate.open
    assert unhealthy_gpus_value(rep) == SLOT_DB
    body = metrics.render(rep).decode()
    assert f'gpu_node_agent_gpu_healthy{{gpu="{SLOT_DB}",uuid="{SLOT_DB}"}} 0' in body


def test_a_minimum_above_the_gpu_count_means_all():
    rep = _report(FATAL, minimum=9)
    assert rep.health.required == 8 and not rep.gate.open


def test_cordon_only_below_the_minimum():
    cfg = kube_config(cordon_on_fatal=True).kube
    kept = plan(_report(FATAL, minimum=7), _node(), cfg, 0, 1.0e9)
    assert "spec" not in kept.node_patch and CORDONED not in kept.node_patch["metadata"][
        "annotations"]
    below = plan(_report(FATAL, minimum=None), _node(), cfg, 0, 1.0e9)
    assert below.node_patch["spec"] == {"unschedulable": True}
    assert below.node_patch["metadata"]["annotations"][CORDONED] == "gpu-xid"
    # two GPUs down with a minimum of 7: below it, so cordoned
    two = _results_naming(("gpu-xid", 5), ("gpu-ecc", 6))
    rep = build_report(two, "device-plugin", False, "h", 0.0, "t", gpus=_snap(8),
                       min_healthy_gpus=7)
    assert not rep.gate.open and set(rep.gate.blocking) == {"gpu-xid", "gpu-ecc"}
    p = plan(rep, _node(), cfg, 0, 1.0e9)
    assert p.node_patch["spec"] == {"unschedulable": True}
    assert p.node_patch["metadata"]["annotations"][ANN] == f"{_uuid(5)},{_uuid(6)}"


def test_the_allocation_label_keeps_its_rules():
    cfg = kube_config(consecutive_opens=3).kube
    rep = _report(FATAL, minimum=7)
    assert ALLOC not in plan(rep, _node(), cfg, 2, 1.0e9).node_patch["metadata"]["labels"]
    assert plan(rep, _node(), cfg, 3, 1.0e9).labels[ALLOC] == "device-plugin"
    # closed (the default): an existing label is kept on a failure, as before
    held = _node()
    held["metadata"]["labels"][ALLOC] = "device-plugin"
    p = plan(_report(FATAL), held, cfg, 0, 1.0e9)
    assert p.labels[ALLOC] == "device-plugin" and p.labels[HEALTH] == "false"


@pytest.mark.parametrize("path", ["dra", "operator-gpucluster"])
def test_on_dra_paths_the_minimum_is_advisory(path):
    rep = _report(FATAL, path=path, minimum=7)
    assert not rep.gate.open and rep.gate.blocking == ("gpu-xid",)
    doc = report_dict(rep)["gpus"]
    assert doc["advisory"] is True and doc["tolerated"] is False and doc["healthy"] == 7
    cfg = kube_config(cordon_on_fatal=True).kube
    p = plan(rep, _node(), cfg, 0, 1.0e9)
    assert p.node_patch["metadata"]["annotations"][ANN] == GPU5  # still reported
    assert p.node_patch["spec"] == {"unschedulable": True}


def test_a_failure_that_names_no_gpu_still_closes_the_gate():
    results = _results_naming(("gpu-xid", 5)) + [_result("driver-loaded", Status.FAIL)]
    rep = build_report(results, "device-plugin", False, "h", 0.0, "t", gpus=_snap(8),
                       min_healthy_gpus=1)
    assert not rep.gate.open and rep.gate.blocking == ("driver-loaded",)
    # an unknown per-GPU check names no GPU: it closes whatever the minimum
    unknown = [_result("gpu-ecc", Status.UNKNOWN, {"gpus_at_fault": [{"index": 1}]})]
    rep = build_report(unknown, "device-plugin", False, "h", 0.0, "t", gpus=_snap(8),
                       min_healthy_gpus=1)
    assert rep.gate.blocking == ("gpu-ecc",)


def test_strict_counts_a_warning_that_names_a_gpu():
    warn = [_result("gpu-xid", Status.WARN, {"gpus_at_fault": [{"index": 2}]})]
    rep = build_report(warn, "device-plugin", True, "h", 0.0, "t", gpus=_snap(8),
                       min_healthy_gpus=7)
    assert rep.gate.open and [g.index for g in rep.health.unhealthy] == [2]
    plain = build_report(warn, "device-plugin", False, "h", 0.0, "t", gpus=_snap(8))
    assert plain.gate.open and plain.health.unhealthy == ()


@pytest.mark.parametrize("cid", ["gpu-thermal", "gpu-ecc", "gpu-row-remap", "mig-mode",
                                 "gpu-pcie-link", "gpu-sku"])
def test_a_gpu_fault_the_device_plugin_does_not_fence_still_closes_the_gate(cid):
    # k8s-device-plugin withdraws a GPU on an XID event only: a GPU failing on its counters,
    # temperature, link width, MIG mode or SKU stays allocatable, so keeping the node open for
    # "seven healthy GPUs" would send pods to the eighth. It is still named unhealthy.
    rep = build_report(_results_naming((cid, 2)), "device-plugin", False, "h", 0.0, "t",
                       gpus=_snap(8), min_healthy_gpus=7)
    assert not rep.gate.open and rep.gate.blocking == (cid,)
    assert [(g.index, g.failing) for g in rep.health.unhealthy] == [(2, (cid,))]
    p = plan(rep, _node(), kube_config().kube, 0, 1.0e9)
    assert p.node_patch["metadata"]["annotations"][ANN] == _uuid(2)


def test_the_annotation_is_removed_when_every_gpu_is_healthy():
    healthy = build_report([], "device-plugin", False, "h", 0.0, "t", gpus=_snap(8))
    p = plan(healthy, _node({ANN: GPU5}), kube_config().kube, 0, 1.0e9)
    assert p.node_patch["metadata"]["annotations"][ANN] is None
    p = plan(healthy, _node(), kube_config().kube, 0, 1.0e9)
    assert ANN not in (p.node_patch.get("metadata") or {}).get("annotations", {})


def test_the_annotation_is_bounded():
    n = LISTED_MAX + 6
    rep = build_report(_results_naming(*[("gpu-ecc", i) for i in range(n)]), "device-plugin",
                       False, "h", 0.0, "t", gpus=_snap(n))
    value = unhealthy_gpus_value(rep)
    names = value.split(",")
    assert len(names) == LISTED_MAX + 1 and names[-1] == "+6"
    assert names[:-1] == sorted(_uuid(i) for i in range(n))[:LISTED_MAX]
    # 256 KiB is all annotations together (apimachinery TotalAnnotationSizeLimitB)
    assert len(value) < 256 * 1024 // 32


@pytest.mark.parametrize("bad", [0, -1, "7", 7.5, True, "some"])
def test_min_healthy_gpus_must_be_all_or_an_integer_of_at_least_one(bad):
    with pytest.raises(ValidationError, match="min_healthy_gpus"):
        load_policy(2, {"health": {"min_healthy_gpus": bad}})


def test_a_bad_min_healthy_gpus_in_the_config_is_exit_2_naming_the_field(tmp_path, capsys):
    cfg = tmp_path / "agent.yaml"
    cfg.write_text("policy:\n  health:\n    min_healthy_gpus: 0\n")
    rc = main(["check", "--bundle", FATAL, "--config", str(cfg)])
    err = capsys.readouterr().err
    assert rc == 2 and "min_healthy_gpus" in err and str(cfg) in err


def test_check_exits_0_with_seven_and_1_with_the_default(tmp_path, capsys):
    cfg = tmp_path / "agent.yaml"
    cfg.write_text("allocation_path: device-plugin\npolicy:\n  health:\n    min_healthy_gpus: 7\n")
    only = ["--only", "nvml-responsive,gpu-count,gpu-xid"]
    assert main(["check", "--bundle", FATAL, "--config", str(cfg), *only]) == 0
    cfg.write_text("allocation_path: device-plugin\n")
    assert main(["check", "--bundle", FATAL, "--config", str(cfg), *only]) == 1
    capsys.readouterr()


# -- helpers --------------------------------------------------------------------------------
def _uuid(i):
    return f"GPU-00000000-0000-4000-8000-{i:012d}"


def _snap(n):
    return {"schema_version": 1, "source": "nvml", "error": None, "device_count": n,
            "gpus": [{"index": i, "uuid": _uuid(i), "pci_bus_id": f"00000000:{i + 16:02X}:00.0"}
                     for i in range(n)]}


def _result(cid, status, details=None):
    return CheckResult(id=cid, title=cid, severity=Severity.CRITICAL, status=status,
                       summary=f"{cid} {status}", remediation="-", gates=ALL_PATHS,
                       details=dict(details or {}), duration_s=0.0)


def _results_naming(*pairs):
    """One failing result per check id, naming the GPUs (by index) given for it."""
    by_check = {}
    for cid, index in pairs:
        by_check.setdefault(cid, []).append({"index": index, "uuid": _uuid(index)})
    return [_result(cid, Status.FAIL, {"gpus_at_fault": refs}) for cid, refs in by_check.items()]


def test_the_json_validates_against_the_schema():
    schema = json.loads((REPO / "docs/report.schema.json").read_text())
    for rep in (_report(FATAL, minimum=7), _report(MISSING), _report(FATAL, path="dra")):
        jsonschema.validate(json.loads(json.dumps(report_dict(rep))), schema)
    bad = report_dict(_report(FATAL, minimum=7))
    bad["gpus"]["min_healthy_gpus"] = 0
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(json.loads(json.dumps(bad)), schema)


def test_the_node_double_refuses_annotations_over_256_kib_like_the_server():
    from tests.kube_double import _validate_meta

    n = LISTED_MAX + 6
    rep = build_report(_results_naming(*[("gpu-ecc", i) for i in range(n)]), "device-plugin",
                       False, "h", 0.0, "t", gpus=_snap(n))
    ours = {ANN: unhealthy_gpus_value(rep)}
    assert _validate_meta({"annotations": ours}) == []
    # someone else's annotations already near the limit: the server's 422 wording
    full = dict(ours, **{"other.example.com/blob": "x" * (256 * 1024 - 30)})
    assert _validate_meta({"annotations": full}) == [
        ("metadata.annotations", "Too long: must have at most 262144 bytes")]


def test_gpu_count_names_gpus_only_when_they_explain_the_counts(tmp_path):
    from tests.checks.gpu_support import results

    # a GPU NVML lists as lost (gpu_lost, GPU 3 of the gpu family's bundle): named by index
    _, checks, _ = results("gpu-lost")
    assert checks["gpu-count"]["details"]["gpus_at_fault"] == [{"index": 3}]
    cfg = tmp_path / "agent.yaml"
    # expected_gpus 16 on 8 GPUs: no GPU explains the other 8, so nothing is named
    cfg.write_text("expected_gpus: 16\n")
    _, checks, _ = results("gpu-h100-snapshot-only", config=cfg)
    assert checks["gpu-count"]["status"] == "fail"
    assert "gpus_at_fault" not in checks["gpu-count"]["details"]
    # the missing GPU explains 8 expected; 7 expected while PCI shows 8 is not explained
    for expected, named in ((8, [{"pci_bus_id": SLOT_DB}]), (7, None)):
        cfg.write_text(f"expected_gpus: {expected}\n")
        rep = _report_with(MISSING, cfg)
        assert rep.result("gpu-count").details.get("gpus_at_fault") == named
        assert rep.gate.open is (named is not None)


def _report_with(bundle, cfg_path):
    """As _report with min_healthy_gpus 7 and the config file's other settings."""
    import yaml

    data = yaml.safe_load(cfg_path.read_text())
    data["policy"] = {"health": {"min_healthy_gpus": 7}}
    cfg = Config.model_validate(data)
    policy = resolve_policy(cfg, None, "device-plugin")
    with open_host(bundle=bundle) as host:
        results = Engine(CHECKS).run(host, policy)
        return build_report(results, "device-plugin", False, "h", 0.0, "t",
                            gpus=host.gpus_if_fetched(), min_healthy_gpus=min_healthy_of(policy))


def test_findings_name_a_gpu_only_when_every_finding_of_the_status_has_one():
    from checks.gpu.common import Findings, each_field

    snap = {"gpus": [{"index": i, "uuid": _uuid(i), "pci_bus_id": f"00000000:{i + 16:02X}:00.0",
                      "ecc": {"x": i}} for i in range(3)]}
    f = Findings()
    for gpu, _ in each_field(snap, "ecc", f):
        if gpu["index"] == 1:
            f.fail("code", "GPU 1 bad")
        f.warn("warn-code", f"GPU {gpu['index']} meh")
    out = f.outcome("ok", "ECC")
    assert out.status == Status.FAIL
    assert out.details["gpus_at_fault"] == [
        {"index": 1, "uuid": _uuid(1), "pci_bus_id": "00000000:11:00.0"}]
    # a finding after the loop names no GPU: the whole verdict is then not attributed
    f.fail("code", "a host-wide finding")
    assert "gpus_at_fault" not in f.outcome("ok", "ECC").details
    # warnings: every one names its GPU
    w = Findings()
    for gpu, _ in each_field(snap, "ecc", w):
        w.warn("warn-code", f"GPU {gpu['index']} meh")
    assert [r["index"] for r in w.outcome("ok", "ECC").details["gpus_at_fault"]] == [0, 1, 2]


def test_the_condition_message_stays_within_200_characters():
    n = 20
    rep = build_report(_results_naming(*[("gpu-xid", i) for i in range(5)]), "device-plugin",
                       False, "h", 0.0, "t", gpus=_snap(n), min_healthy_gpus=10)
    msg = plan(rep, _node(), kube_config().kube, 0, 1.0e9).condition["message"]
    assert len(msg) == 200 and msg.endswith("...")
    assert msg.startswith("gate device-plugin open: 15 of 20 GPUs healthy (min_healthy_gpus 10)")


def test_the_text_output_names_the_unhealthy_gpu_before_the_gate_line():
    from agent.outputs.render import render_text

    lines = render_text(_report(FATAL, minimum=7)).splitlines()
    assert lines[-1] == "gate device-plugin: OPEN"
    assert lines[-2] == (f"gpus: 7 of 8 healthy (min_healthy_gpus 7: the gate tolerates them); "
                         f"unhealthy: GPU 5 ({GPU5}): gpu-xid")
    lines = render_text(_report(MISSING)).splitlines()
    assert lines[-2] == f"gpus: 7 of 8 healthy; unhealthy: GPU {SLOT_DB}: gpu-count"
    healthy = build_report([], "device-plugin", False, "h", 0.0, "t", gpus=_snap(8))
    assert not any(ln.startswith("gpus:") for ln in render_text(healthy).splitlines())


# -- gpu-xid's repeating application XIDs: named, but not fenced by the device plugin ------
# k8s-device-plugin internal/rm/health.go skips the application XIDs (13, 31, 43, 45, 68,
# 109) its health check sees, the restart-app class gpu-xid counts against thresholds: a GPU
# that xid-repeating-fail names is unhealthy, and the verdict keeps closing the gate whatever
# min_healthy_gpus says (it closed it before the GPU was named, too).
REPEATING = str(BUNDLES / "xid-13-repeating")  # XID 13 x12 on GPU 1 (PCI:0000:2a:00)
GPU1 = "GPU-00000000-0000-4000-8000-000000000001"


def _repeating_report(minimum=None, path="device-plugin"):
    xid = {"codes": {13: {"threshold": {"count": 10, "window_s": 3600, "status": "fail"}}}}
    health = {"health": {"min_healthy_gpus": minimum}} if minimum is not None else {}
    cfg = Config.model_validate({"policy": dict({"xid": xid}, **health)})
    policy = resolve_policy(cfg, None, path)
    with open_host(bundle=REPEATING) as host:
        results = Engine(CHECKS).run(host, policy)
        return build_report(results, path, False, "h", 0.0, "t", gpus=host.gpus_if_fetched(),
                            min_healthy_gpus=min_healthy_of(policy))


@pytest.mark.parametrize("minimum", [None, 7, 1])
def test_a_repeating_xid_fail_names_its_gpu_and_still_closes_the_gate(minimum):
    rep = _repeating_report(minimum)
    xid = rep.result("gpu-xid")
    assert (xid.status, xid.code) == (Status.FAIL, "xid-repeating-fail")
    assert [r["uuid"] for r in xid.details["gpus_at_fault"]] == [GPU1]
    assert [g.uuid for g in rep.health.unhealthy] == [GPU1]
    assert rep.health.attributed == ()
    assert not rep.gate.open and rep.gate.blocking == ("gpu-xid",)
    doc = report_dict(rep)
    assert [d["index"] for d in doc["gpus"]["devices"] if not d["healthy"]] == [1]
    assert doc["gate"]["open"] is False


def test_a_fatal_xid_stays_fenced_beside_the_unfenced_code():
    # The same check with a reset-class code: the plugin fences it, so 7 of 8 keeps the gate
    # open (the code, not the check id, decides).
    fatal = [CheckResult(id="gpu-xid", title="gpu-xid", severity=Severity.CRITICAL,
                         status=Status.FAIL, summary="-", remediation="-", gates=ALL_PATHS,
                         details={"gpus_at_fault": [{"index": 2}]}, duration_s=0.0, code=code)
             for code in ("xid-needs-reset", "xid-repeating-fail")]
    open_ = build_report(fatal[:1], "device-plugin", False, "h", 0.0, "t", gpus=_snap(8),
                         min_healthy_gpus=7)
    assert open_.gate.open and open_.health.attributed == ("gpu-xid",)
    closed = build_report(fatal[1:], "device-plugin", False, "h", 0.0, "t", gpus=_snap(8),
                          min_healthy_gpus=7)
    assert not closed.gate.open and closed.gate.blocking == ("gpu-xid",)
    assert closed.health.attributed == () and [g.index for g in closed.health.unhealthy] == [2]
