"""`gpu-node-agent check` on this machine against the HTTPS API double: it shows what it would
write and writes nothing; with --apply it writes the health label and the condition."""
import json

import pytest

from tests.conftest import run_cli
from tests.kube_double import KubeDouble, kubeconfig_yaml

pytestmark = pytest.mark.integration
NODE = "gpu-host-1"


@pytest.fixture
def setup(tmp_path):
    double = KubeDouble(str(tmp_path)).start()
    double.add_node(NODE)
    double.add_runtimeclass("nvidia", "nvidia")
    cert, key, _, _ = double.client_cert(NODE)
    kc = tmp_path / "kubeconfig"
    kc.write_text(kubeconfig_yaml(double.url, double.ca.path,
                                  {"client-certificate": cert, "client-key": key}))
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"kube:\n  kubeconfig: {kc}\n  node_name: {NODE}\n"
                   f"nfd:\n  enabled: false\n  path: {tmp_path / 'features.d' / 'gpu-node-agent'}\n")
    yield double, str(cfg)
    double.stop()


def test_check_writes_nothing_without_apply(setup):
    double, cfg = setup
    res = run_cli(["check", "--config", cfg, "--path", "device-plugin"])
    assert res.rc in (0, 1), res.err
    assert f"node: {NODE} (from config kube.node_name)" in res.out
    assert "workload.example.com/gpu-healthy=" in res.out and "condition: GPUReady=" in res.out
    assert [e["method"] for e in double.log if e["method"] != "GET"] == []
    rc = next(e for e in double.log if "runtimeclasses" in e["path"])
    assert rc["status"] == 200  # runtimeclass-handler read the API through the host fact
    doc = run_cli(["check", "--config", cfg, "--format", "json"]).json()
    assert doc["context"]["kube"]["node"] == NODE and doc["context"]["kube"]["writes"] == []


def test_check_apply_writes_health_label_and_condition(setup):
    double, cfg = setup
    res = run_cli(["check", "--config", cfg, "--apply", "--format", "json"])
    assert res.rc in (0, 1), res.err
    kube = res.json()["context"]["kube"]
    gate_open = res.json()["gate"]["open"]
    stored = double.nodes[NODE]
    assert stored["metadata"]["labels"]["workload.example.com/gpu-healthy"] == str(gate_open).lower()
    cond = next(c for c in stored["status"]["conditions"] if c["type"] == "GPUReady")
    assert cond["status"] == ("True" if gate_open else "False")
    assert cond == {k: kube["condition"][k] for k in cond}
    assert all("taints" not in json.dumps(e.get("body")) for e in double.log)
    # a second --apply right away changes nothing, unless a check's summary on this machine
    # changed in between (then only the condition's message is rewritten)
    mark = len(double.log)
    again = run_cli(["check", "--config", cfg, "--apply", "--format", "json"]).json()
    patches = [e for e in double.log[mark:] if e["method"] == "PATCH"]
    assert all(e["path"].endswith("/status") for e in patches)
    if patches:
        assert again["context"]["kube"]["condition"]["message"] != cond["message"]
