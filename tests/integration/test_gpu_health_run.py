"""`health.min_healthy_gpus` through a real `run` scheduler (the Daemon serving in a thread on
the 8-GPU bundle with XID 48 on GPU 5, tests/fixtures/families/gpu_health.py; the real
nvml-responsive, gpu-count and gpu-xid checks; the Publisher over HTTPS to the API double):
with `min_healthy_gpus: 7` the Node says healthy, is not cordoned and carries the annotation
naming GPU 5's UUID; with the default the health label is false and cordon_on_fatal cordons."""
from pathlib import Path
from types import SimpleNamespace

import pytest

from agent.cli import resolve_policy
from agent.cli_run import host_opener
from agent.config import Config
from agent.daemon.inputs import Source
from agent.daemon.sdnotify import Notifier
from agent.daemon.service import Daemon, Generation
from agent.logs import setup
from agent.model import ALL_PATHS, CheckResult, Severity, Status
from agent.outputs.node.publish import Publisher
from agent.report import build_report
from checks.gpu.gpu_count import GPU_COUNT
from checks.nvml_responsive import NVML_RESPONSIVE
from checks.xid.gpu_xid import GPU_XID
from tests.integration.agentproc import wait_for
from tests.kube_setup import NODE, serve_node
from tests.reliability.helpers import Running

pytestmark = pytest.mark.integration
BUNDLE = str(Path(__file__).resolve().parents[1] / "fixtures/bundles/health-one-fatal-xid")
GPU5 = "GPU-00000000-0000-4000-8000-000000000005"  # tests/fixtures/families/xid.py UUIDS[5]
ANN = "gpu-node-agent.workload.example.com/unhealthy-gpus"
CORDONED = "gpu-node-agent.workload.example.com/cordoned"
HEALTH = "workload.example.com/gpu-healthy"


@pytest.fixture
def api(tmp_path):
    yield from serve_node(tmp_path, token="t")


def _run_until_published(tmp_path, kc, policy):
    config = Config.model_validate({
        "allocation_path": "device-plugin",
        "state_dir": str(tmp_path / "state"),
        "run": {"fast_interval": 600, "slow_interval": 600, "listen_address": "127.0.0.1:0"},
        "kube": {"kubeconfig": kc, "node_name": NODE, "request_timeout": 2,
                 "cordon_on_fatal": True},
        "policy": policy,
    })
    gen = Generation(config, None, resolve_policy(config, None, "device-plugin"),
                     "device-plugin", [])
    # `run --bundle B` builds this source (agent/cli_run.py); the Publisher is passed in as
    # the live command line would make it (a fixture is never published by `run` itself).
    source = Source(host_opener(SimpleNamespace(bundle=BUNDLE, host_root=None), None, None),
                    None)
    pub = Publisher(config)
    d = Daemon([NVML_RESPONSIVE, GPU_COUNT, GPU_XID], lambda: gen, source, "test", setup(),
               notifier=Notifier({}), outputs=[pub])
    return d, pub


def _published(double):
    """The health label and the condition both written (two PATCHes: the Node, its status)."""
    node = double.nodes[NODE]
    conds = (node.get("status") or {}).get("conditions") or []
    return HEALTH in (node["metadata"].get("labels") or {}) and any(
        c.get("type") == "GPUReady" for c in conds)


def test_seven_of_eight_keeps_the_node_healthy_and_names_gpu_5(api, tmp_path):
    double, kc = api
    d, pub = _run_until_published(tmp_path, kc, {"health": {"min_healthy_gpus": 7}})
    try:
        with Running(d):
            wait_for(lambda: _published(double), 30, "the first Node write")
            assert d.report.gate.open
    finally:
        pub.close()
    node = double.nodes[NODE]
    assert node["metadata"]["labels"][HEALTH] == "true"
    assert node["metadata"]["annotations"][ANN] == GPU5
    assert CORDONED not in node["metadata"]["annotations"]
    assert not node.get("spec", {}).get("unschedulable")
    cond = next(c for c in node["status"]["conditions"] if c["type"] == "GPUReady")
    assert cond["status"] == "True" and cond["reason"] == "GateOpen"
    assert cond["message"].endswith(f"7 of 8 GPUs healthy (min_healthy_gpus 7); unhealthy: {GPU5}")


def test_the_default_closes_the_gate_and_cordons(api, tmp_path):
    double, kc = api
    d, pub = _run_until_published(tmp_path, kc, {})
    try:
        with Running(d):
            wait_for(lambda: _published(double), 30, "the first Node write")
            assert not d.report.gate.open and d.report.gate.blocking == ("gpu-xid",)
    finally:
        pub.close()
    node = double.nodes[NODE]
    assert node["metadata"]["labels"][HEALTH] == "false"
    assert node["metadata"]["annotations"][ANN] == GPU5
    assert node["metadata"]["annotations"][CORDONED] == "gpu-xid"
    assert node["spec"]["unschedulable"] is True
    cond = next(c for c in node["status"]["conditions"] if c["type"] == "GPUReady")
    assert cond["status"] == "False" and cond["reason"] == "CheckFailed"


def test_the_double_merges_the_annotation_in_and_out_like_the_server(api):
    """JSON merge patch (RFC 7386) of metadata.annotations: the value set, then null removes
    it; nothing else on the Node is touched."""
    double, kc = api
    double.nodes[NODE]["metadata"].setdefault("annotations", {})["other.example.com/a"] = "kept"
    config = Config.model_validate({"kube": {"kubeconfig": kc, "node_name": NODE,
                                             "request_timeout": 2}})
    snap = {"gpus": [{"index": i, "uuid": f"GPU-{i}", "pci_bus_id": f"00000000:{i + 16:02X}:00.0"}
                     for i in range(8)]}
    sick = [CheckResult(id="gpu-xid", title="x", severity=Severity.CRITICAL, status=Status.FAIL,
                        summary="XID 48", remediation="-", gates=ALL_PATHS, duration_s=0.0,
                        details={"gpus_at_fault": [{"index": 5, "uuid": "GPU-5"}]})]
    pub = Publisher(config)
    try:
        for results, want in ((sick, "GPU-5"), ([], None)):
            rep = build_report(results, "device-plugin", False, "h", 0.0, "t", gpus=snap,
                               min_healthy_gpus=7)
            assert pub.publish(rep).error is None
            annotations = double.nodes[NODE]["metadata"]["annotations"]
            assert annotations.get(ANN) == want
            assert annotations["other.example.com/a"] == "kept"
    finally:
        pub.close()
    patches = [e for e in double.log if e["method"] == "PATCH" and not e["path"].endswith("/status")]
    assert len(patches) >= 2 and all(e.get("status") == 200 for e in patches)
