"""Hostile snapshots on the per-GPU health path (agent/gpu_health.py) and where it ends up:
the gpu_healthy series (Prometheus text format 0.0.4: a label value escapes backslash, double
quote and newline, https://prometheus.io/docs/instrumenting/exposition_formats/) and the
unhealthy-gpus annotation (at most 64 names of at most 64 characters: condition.py)."""
import types

from agent.gpu_health import evaluate
from agent.model import ALL_PATHS, CheckResult, Severity, Status
from agent.outputs.exposition import Writer
from agent.outputs.metrics_gpu_health import gpu_health_families
from agent.outputs.node.condition import unhealthy_gpus_value

PATH = "device-plugin"


def _result(cid, refs):
    return CheckResult(id=cid, title=cid, severity=Severity.CRITICAL, status=Status.FAIL,
                       summary="-", remediation="-", gates=ALL_PATHS,
                       details={"gpus_at_fault": refs}, duration_s=0.0)


def _series(health):
    out = Writer()
    gpu_health_families(out, types.SimpleNamespace(health=health))
    return [line for line in out.lines if not line.startswith("#")]


def test_a_duplicate_uuid_does_not_move_a_fault_to_the_other_gpu():
    """Two snapshot GPUs with one UUID (a broken or hostile snapshot): the check names GPU 2
    by index, UUID and bus id; GPU 2 is the unhealthy one, not the first holder of the UUID."""
    snap = {"gpus": [
        {"index": 0, "uuid": "GPU-ok", "pci_bus_id": "00000000:10:00.0"},
        {"index": 1, "uuid": "GPU-dup", "pci_bus_id": "00000000:11:00.0"},
        {"index": 2, "uuid": "GPU-dup", "pci_bus_id": "00000000:12:00.0"},
    ]}
    ref = {"index": 2, "uuid": "GPU-dup", "pci_bus_id": "00000000:12:00.0"}
    health = evaluate([_result("gpu-xid", [ref])], snap, PATH)
    assert [g.index for g in health.unhealthy] == [2]
    assert 'gpu_node_agent_gpu_healthy{gpu="1",uuid="GPU-dup"} 1' in _series(health)
    assert 'gpu_node_agent_gpu_healthy{gpu="2",uuid="GPU-dup"} 0' in _series(health)


def test_names_with_quotes_and_newlines_stay_one_escaped_line():
    uuid = 'GPU-"x"\n} 1\nfake_series 7\\'
    snap = {"gpus": [{"index": 0, "uuid": uuid, "pci_bus_id": "00000000:10:00.0"}]}
    health = evaluate([_result("gpu-xid", [{"index": 0, "uuid": uuid}])], snap, PATH)
    lines = _series(health)
    assert lines == ['gpu_node_agent_gpu_healthy{gpu="0",uuid="GPU-\\"x\\"\\n} 1\\nfake_series'
                     ' 7\\\\"} 0']
    value = unhealthy_gpus_value(types.SimpleNamespace(health=health))
    assert value is not None and "\n" not in value and len(value) <= 64


def test_a_thousand_gpus_and_absurd_indexes():
    """1,000 GPUs all named: 1,000 series, the annotation 64 names and '+936'; entries whose
    index is not an NVML index (negative, 2**64, text, a bool) are not GPUs of the snapshot."""
    gpus = [{"index": i, "uuid": f"GPU-{i:04d}", "pci_bus_id": f"00000000:{i % 256:02X}:"
             f"{i // 256:02X}.0"} for i in range(1000)]
    gpus += [{"index": bad, "uuid": f"GPU-bad-{n}"} for n, bad in
             enumerate([-1, 2**64, "3", True, None])]
    refs = [{"index": i, "uuid": f"GPU-{i:04d}"} for i in range(1000)]
    health = evaluate([_result("gpu-xid", refs)], {"gpus": gpus}, PATH)
    assert len(health.gpus) == 1000 and health.healthy_count == 0
    assert len(_series(health)) == 1000
    value = unhealthy_gpus_value(types.SimpleNamespace(health=health))
    assert value is not None
    names = value.split(",")
    assert len(names) == 65 and names[-1] == "+936" and names[0] == "GPU-0000"


def test_finding_the_gpus_a_check_names_does_not_scan_every_gpu_per_name(monkeypatch):
    """1,000 GPUs named by seven checks by bus id alone: the bus ids are read a few times per
    GPU and per name, not once per GPU for every name (a scan made it 3.5 million reads,
    seconds of a cycle)."""
    from agent import gpu_health

    calls = []
    real = gpu_health.pci_key

    def counting(value):
        calls.append(1)
        return real(value)

    monkeypatch.setattr(gpu_health, "pci_key", counting)
    gpus = [{"index": i, "uuid": f"GPU-{i:04d}", "pci_bus_id": f"00000000:{i % 256:02X}:"
             f"{i // 256:02X}.0"} for i in range(1000)]
    refs = [{"pci_bus_id": g["pci_bus_id"]} for g in gpus]
    health = evaluate([_result(f"check-{k}", refs) for k in range(7)], {"gpus": gpus}, PATH)
    assert health.healthy_count == 0 and len(health.gpus) == 1000
    assert len(calls) <= 4 * (1000 + 7 * 1000), len(calls)


def test_a_node_whose_annotations_are_of_the_wrong_types_is_planned_not_raised():
    """The Node comes from the API or a bundle's host.json: annotations that are a list, a
    value that is a number or an object; the unhealthy-gpus annotation is written as text."""
    from agent.outputs.node.reconcile import plan
    from agent.report import build_report
    from tests.kube_reports import config as kube_config

    ann = "gpu-node-agent.workload.example.com/unhealthy-gpus"
    snap = {"gpus": [{"index": i, "uuid": f"GPU-{i}", "pci_bus_id": f"00000000:1{i}:00.0"}
                     for i in range(8)]}
    rep = build_report([_result("gpu-xid", [{"index": 5, "uuid": "GPU-5"}])], PATH, False,
                       "h", 0.0, "t", gpus=snap, min_healthy_gpus=7)
    cfg = kube_config(cordon_on_fatal=True).kube
    for annotations in ([ann, "GPU-5"], {ann: 5}, {ann: {"GPU-5": True}}, "GPU-5", None):
        node = {"metadata": {"name": "n", "labels": ["x"], "annotations": annotations},
                "spec": [], "status": {"conditions": "none"}}
        p = plan(rep, node, cfg, 3, 1.0e9)
        assert p.node_patch["metadata"]["annotations"][ann] == "GPU-5", annotations
        assert "spec" not in p.node_patch  # 7 of 8 healthy: not cordoned
