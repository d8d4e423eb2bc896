"""runtimeclass-handler on fixture bundles whose host.json carries the API facts
(`runtimeclasses`, `node`) as agent/kube/facts.py records them."""
import pytest

from tests.conftest import bundle, run_cli


def result(name, path="device-plugin", extra=()):
    res = run_cli(["check", "--bundle", bundle(name), "--path", path, "--only",
                   "runtimeclass-handler", "--format", "json", *extra])
    assert res.rc in (0, 1), res.err
    doc = res.json()
    (check,) = doc["checks"]
    return res.rc, check, doc


@pytest.mark.parametrize("name, status, needle, rc", [
    ("kube-runtimeclass-ok", "pass", "RuntimeClass 'nvidia' handler 'nvidia'", 0),
    ("kube-runtimeclass-missing", "fail", "RuntimeClass 'nvidia' not found (cluster has: kata-qemu)", 1),
    ("kube-runtimeclass-handler-mismatch", "fail", "handler 'nvidia-cdi', containerd's runtime is 'nvidia'", 1),
    ("kube-api-unreachable", "skip", "Kubernetes API not reachable: /var/lib/kubelet/kubeconfig", 0),
    ("time-chrony-synced", "skip", "not captured", 0),
])
def test_runtimeclass_handler(name, status, needle, rc):
    got_rc, check, doc = result(name)
    assert check["status"] == status and needle in check["summary"]
    assert got_rc == rc


def test_runtimeclass_does_not_gate_dra():
    rc, check, doc = result("kube-runtimeclass-missing", path="dra")
    assert check["status"] == "fail" and rc == 0 and doc["gate"]["open"] is True


def test_handler_follows_the_containerd_config(tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("containerd:\n  handler: nvidia-cdi\n")
    _, check, _ = result("kube-runtimeclass-handler-mismatch", extra=("--config", str(cfg)))
    assert check["status"] == "pass"


def test_check_shows_what_it_would_write_against_the_captured_node():
    from checks.registry import ALL_CHECKS

    others = ",".join(c.id for c in ALL_CHECKS if c.id != "runtimeclass-handler")
    res = run_cli(["check", "--bundle", bundle("kube-runtimeclass-missing"), "--path", "device-plugin",
                   "--skip", others])
    assert res.rc == 1
    assert "node: mi-0123456789abcdef0 (from the Node captured in the bundle)" in res.out
    assert "workload.example.com/gpu-healthy=false" in res.out
    assert "condition: GPUReady=False reason=CheckFailed: runtimeclass-handler fail: " in res.out
    assert "not applied: use --apply" in res.out


def test_apply_is_refused_for_a_bundle_and_with_only():
    res = run_cli(["check", "--bundle", bundle("kube-runtimeclass-ok"), "--apply"])
    assert res.rc == 2 and "not with --bundle" in res.err
    res = run_cli(["check", "--only", "os-supported", "--apply"])
    assert res.rc == 2 and "not with --only" in res.err


@pytest.mark.parametrize("name, code", [
    ("kube-runtimeclass-missing", "runtimeclass-missing"),
    ("kube-runtimeclass-handler-mismatch", "handler-mismatch"),
    ("runtimeclass-handler-facts-malformed", "runtimeclasses-malformed"),
    ("kube-runtimeclass-ok", None),
])
def test_failure_codes(name, code):
    _, check, _ = result(name)
    assert check["code"] == code, check["summary"]


def test_malformed_facts_are_unknown_naming_the_type():
    _, check, _ = result("runtimeclass-handler-facts-malformed")
    assert check["status"] == "unknown" and "unexpected runtimeclasses fact: list" in check["summary"]
