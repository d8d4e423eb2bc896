"""`check --apply` against the API double, on this machine with every check skipped (so the
gate is open whatever the machine has): the exit code says whether the verdict was fully
written (0) or not (4; a closed gate's 1 wins), the JSON `publish` object lists each write and
its answer, a refused label patch does not stop the condition, and one run costs one Node GET,
at most one PATCH of each kind and one exec-plugin run."""
import json
from pathlib import Path

import jsonschema
import pytest

from checks.registry import ALL_CHECKS
from tests.conftest import run_cli
from tests.kube_double import KubeDouble, kubeconfig_yaml

NODE = "gpu-host-1"
HEALTH = "workload.example.com/gpu-healthy"
RECORDING = Path(__file__).resolve().parent.parent / "fixtures" / "kube-apiserver" / (
    "node-identity-exchanges-1.34.9.jsonl")
ALL_IDS = ",".join(c.id for c in ALL_CHECKS)
SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "docs" / "report.schema.json")
                    .read_text())


def recorded(name):
    """A recorded answer body, to inject where the config cannot provoke it any more."""
    for line in RECORDING.read_text().splitlines():
        ex = json.loads(line)
        if ex["name"] == name:
            return ex["response"]["body"]
    raise KeyError(name)


@pytest.fixture
def setup(tmp_path):
    double = KubeDouble(str(tmp_path)).start()
    double.add_node(NODE)
    double.add_runtimeclass("nvidia", "nvidia")
    double.add_token("exec-token", f"system:node:{NODE}")
    runs = tmp_path / "exec-runs"
    plugin = tmp_path / "plugin.sh"
    plugin.write_text(
        "#!/bin/sh\n"
        f"echo run >> {runs}\n"
        "echo '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\","
        "\"status\":{\"token\":\"exec-token\"}}'\n"
    )
    plugin.chmod(0o755)
    kc = tmp_path / "kubeconfig"
    kc.write_text(kubeconfig_yaml(double.url, double.ca.path, {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin),
        "interactiveMode": "Never"}}))
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"kube:\n  kubeconfig: {kc}\n  node_name: {NODE}\n  consecutive_opens: 1\n"
                   f"nfd:\n  enabled: false\n  path: {tmp_path / 'features.d' / 'x'}\n")
    yield double, str(cfg), runs
    double.stop()


def apply(cfg, *extra):
    return run_cli(["check", "--config", cfg, "--apply", "--format", "json", "--skip", ALL_IDS,
                    *extra])


def exec_runs(runs):
    return len(runs.read_text().splitlines()) if runs.exists() else 0


def gpu_ready(double):
    return next((c for c in double.nodes[NODE]["status"]["conditions"]
                 if c["type"] == "GPUReady"), None)


def test_fully_written_is_0_with_one_read_two_writes_one_exec_run(setup):
    double, cfg, runs = setup
    res = apply(cfg)
    assert res.rc == 0, res.out[-2000:] + res.err
    doc = res.json()
    jsonschema.validate(doc, SCHEMA)
    assert doc["gate"]["open"] is True
    assert doc["publish"]["complete"] is True
    assert [(w["write"], w["ok"], w["code"]) for w in doc["publish"]["writes"]] == [
        ("node", True, 200), ("status", True, 200)]
    node_paths = [(e["method"], e["path"]) for e in double.log if "/nodes" in e["path"]]
    assert node_paths == [
        ("GET", f"/api/v1/nodes/{NODE}"),
        ("PATCH", f"/api/v1/nodes/{NODE}"),
        ("PATCH", f"/api/v1/nodes/{NODE}/status"),
    ]
    assert exec_runs(runs) == 1
    assert double.nodes[NODE]["metadata"]["labels"][HEALTH] == "true"


@pytest.mark.parametrize("refusal", [
    "merge-patch label value invalid",  # 422 Invalid
    "merge-patch own node-restriction label",  # 403 Forbidden (NodeRestriction)
])
def test_refused_label_patch_still_writes_the_condition_and_exits_4(setup, refusal):
    double, cfg, _ = setup
    body = recorded(refusal)
    double.inject(body["code"], method="PATCH", body=body)  # the first PATCH: the labels
    res = apply(cfg)
    assert res.rc == 4, res.err
    doc = res.json()
    jsonschema.validate(doc, SCHEMA)
    assert doc["publish"]["complete"] is False
    writes = {w["write"]: w for w in doc["publish"]["writes"]}
    assert (writes["node"]["ok"], writes["node"]["code"], writes["node"]["reason"]) == (
        False, body["code"], body["reason"])
    # the server's own message, cut at 200 characters (197 and "...") when longer
    msg = body["message"]
    assert writes["node"]["message"] == (msg if len(msg) <= 200 else msg[:197] + "...")
    assert writes["status"]["ok"] is True
    cond = gpu_ready(double)
    assert (cond["status"], cond["reason"]) == ("True", "GateOpen")  # still written
    assert HEALTH not in double.nodes[NODE]["metadata"]["labels"]


def test_refused_condition_still_writes_the_labels_and_exits_4(setup):
    double, cfg, _ = setup
    body = recorded("SMP other node status")  # a 403 Status as NodeRestriction words it
    route = double._route

    def refuse_status(method, path, query, user, groups, ctype, payload):
        if method == "PATCH" and path.endswith("/status"):
            return 403, body
        return route(method, path, query, user, groups, ctype, payload)

    double._route = refuse_status
    res = apply(cfg)
    assert res.rc == 4
    writes = {w["write"]: w for w in res.json()["publish"]["writes"]}
    assert writes["node"]["ok"] is True
    assert (writes["status"]["ok"], writes["status"]["code"]) == (False, 403)
    assert double.nodes[NODE]["metadata"]["labels"][HEALTH] == "true"
    assert gpu_ready(double) is None


def failing_check():
    from agent.model import ALL_PATHS, Check, Interval, Severity, failed

    return Check(id="always-fails", title="always fails", severity=Severity.CRITICAL,
                 gates=ALL_PATHS, interval=Interval.FAST, remediation="none",
                 run=lambda host, policy: failed("closed on purpose"))


def test_closed_gate_wins_over_4(setup, monkeypatch):
    double, cfg, _ = setup
    monkeypatch.setattr("agent.cli._registry", lambda args=None: [*ALL_CHECKS, failing_check()])
    body = recorded("merge-patch label value invalid")
    double.inject(422, method="PATCH", body=body)
    res = apply(cfg)  # every real check skipped, the failing one runs
    doc = res.json()
    assert doc["gate"] == {"open": False, "blocking": ["always-fails"]}
    assert doc["publish"]["complete"] is False  # the labels were refused
    assert res.rc == 1
    cond = gpu_ready(double)
    assert (cond["status"], cond["reason"]) == ("False", "CheckFailed")
    assert cond["message"] == "always-fails fail: closed on purpose"


def test_no_credentials_is_found_before_any_request_and_exits_4(setup, tmp_path):
    double, cfg, _ = setup
    kc = tmp_path / "anon-kubeconfig"
    kc.write_text(kubeconfig_yaml(double.url, double.ca.path, {}))
    anon = tmp_path / "anon.yaml"
    anon.write_text(f"kube:\n  kubeconfig: {kc}\n  node_name: {NODE}\n"
                    f"nfd:\n  enabled: false\n  path: {tmp_path / 'x'}\n")
    res = apply(str(anon))
    assert res.rc == 4
    error = res.json()["publish"]["error"]
    assert "has no credentials" in error and "system:anonymous" in error
    assert double.log == []  # detected locally: nothing sent
