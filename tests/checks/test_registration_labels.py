"""registration-labels (checks/registration_labels.py) on its bundles (tests/fixtures/families/
registration.py) and on trees written here. Expected values are what each file says: the key
workload.example.com/gpu-allocation (agent/config.py's default kube.allocation_label) and the
value written beside it."""
import pytest

import checks.registry as registry
from agent.config import KubeConfig
from agent.host.redact import redact_file
from checks.registration_labels import DEFAULT_ALLOCATION_LABEL, REGISTRATION_LABELS
from tests.conftest import BUNDLES, run_cli

KEY = "workload.example.com/gpu-allocation"


@pytest.fixture(autouse=True)
def registered(monkeypatch):
    # Until the lead adds the check to checks/registry.py (after allocation-owner).
    if "registration-labels" not in registry.by_id():
        monkeypatch.setattr(registry, "ALL_CHECKS", registry.ALL_CHECKS + (REGISTRATION_LABELS,))


def verdict(args):
    res = run_cli(["check", *args, "--only", "registration-labels", "--format", "json"])
    assert res.rc in (0, 1), res.err
    doc = res.json()
    return res.rc, {c["id"]: c for c in doc["checks"]}["registration-labels"], doc


def on_bundle(name):
    args = ["--bundle", str(BUNDLES / name)]
    config = BUNDLES / name / "test-config.yaml"
    return verdict(args + (["--config", str(config)] if config.exists() else []))


def tree(tmp_path, files, config=None):
    root = tmp_path / "root"
    for rel, text in files.items():
        p = root / rel.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    root.mkdir(exist_ok=True)
    args = ["--host-root", str(root)]
    if config is not None:
        (tmp_path / "config.yaml").write_text(config)
        args += ["--config", str(tmp_path / "config.yaml")]
    return verdict(args)


def test_the_default_key_is_the_configs():
    assert DEFAULT_ALLOCATION_LABEL == KubeConfig().allocation_label == KEY


@pytest.mark.parametrize("name, where, value", [
    ("registration-labels-nodeconfig-flags", "/etc/eks/nodeadm.d/20-kubelet.yaml spec.kubelet.flags", "dra"),
    ("registration-labels-mime-user-data", "/etc/eks/nodeadm/nodeConfig.yaml spec.kubelet.flags", "device-plugin"),
    ("registration-labels-kubelet-args", "/etc/eks/kubelet/environment", "dra"),
    ("registration-labels-snap-args", "/var/snap/k8s/common/args/kubelet", "dra"),
])
def test_a_registration_label_that_presets_the_key_fails_with_the_fix(name, where, value):
    rc, got, doc = on_bundle(name)
    assert (got["status"], got["code"]) == ("fail", "allocation-label-preset"), got["summary"]
    assert f"{where} --node-labels sets {KEY}={value}" in got["summary"]
    assert got["remediation"] == REGISTRATION_LABELS.failure("allocation-label-preset").fix
    assert "Remove that key from --node-labels" in got["remediation"]
    # Critical on every path: the gate closes.
    assert rc == 1 and "registration-labels" in doc["gate"]["blocking"]


def test_other_registration_labels_pass_naming_what_was_read():
    rc, got, _ = on_bundle("registration-labels-ok")
    assert got["status"] == "pass", got["summary"]
    assert got["summary"] == (f"no kubelet registration label sets {KEY} "
                              "(/etc/eks/nodeadm/nodeConfig.yaml, /etc/eks/kubelet/environment)")
    assert rc == 0


def test_a_source_without_a_nodeconfig_is_unknown():
    _, got, _ = on_bundle("registration-labels-unreadable")
    assert (got["status"], got["code"]) == ("unknown", "kubelet-flags-unreadable")
    assert "/etc/eks/nodeadm/nodeConfig.yaml: no document of kind NodeConfig" in got["summary"]


def test_a_config_pinned_to_policy_version_1_skips_it():
    rc, got, _ = on_bundle("registration-labels-v1-pinned")
    assert (got["status"], got["skip"]) == ("skip", "not-applicable")
    assert "a gate of policy version 2" in got["summary"]
    assert rc == 0
    # The same files under the newest policy (no config) fail.
    _, got, _ = verdict(["--bundle", str(BUNDLES / "registration-labels-v1-pinned")])
    assert got["code"] == "allocation-label-preset"


def test_no_file_at_all_is_nothing_to_judge_not_a_pass(tmp_path):
    # An empty bundle passes no check (tests/checks/test_bundle_isolation.py).
    _, got, _ = tree(tmp_path, {})
    assert (got["status"], got["skip"]) == ("skip", "input-missing")
    assert got["summary"].startswith("no nodeadm NodeConfig and no kubelet args file found")


def test_the_configured_key_and_sources_are_the_ones_read(tmp_path):
    nodeconfig = ("apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelet:\n"
                  "    flags:\n    - --node-labels=gpu.example.org/ready=true\n")
    files = {"/opt/nodeadm/config.yaml": nodeconfig,
             # A label with the default key elsewhere is not this host's allocation label.
             "/etc/default/kubelet": f"KUBELET_EXTRA_ARGS=--node-labels={KEY}=dra\n"}
    config = ("kube:\n  allocation_label: gpu.example.org/ready\n"
              "  nodeadm_config_paths: [/opt/nodeadm/config.yaml]\n")
    _, got, _ = tree(tmp_path, files, config)
    assert got["code"] == "allocation-label-preset"
    assert got["summary"].endswith(
        "/opt/nodeadm/config.yaml spec.kubelet.flags --node-labels sets gpu.example.org/ready=true")


def test_the_flag_as_two_words_and_in_kubeadm_flags(tmp_path):
    files = {"/var/lib/kubelet/kubeadm-flags.env":
             'KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///run/containerd/'
             f'containerd.sock --node-labels {KEY}=operator-gpucluster"\n'}
    _, got, _ = tree(tmp_path, files)
    assert got["summary"].endswith(
        f"/var/lib/kubelet/kubeadm-flags.env --node-labels sets {KEY}=operator-gpucluster")


def test_a_key_that_only_starts_like_it_passes(tmp_path):
    files = {"/etc/eks/kubelet/environment":
             f'NODEADM_KUBELET_ARGS="--node-labels={KEY}-old=dra,x/{KEY}=y"'}
    _, got, _ = tree(tmp_path, files)
    assert got["status"] == "pass", got["summary"]


def test_kube_disabled_is_not_applicable(tmp_path):
    files = {"/etc/eks/kubelet/environment": f'NODEADM_KUBELET_ARGS="--node-labels={KEY}=dra"'}
    _, got, _ = tree(tmp_path, files, "kube:\n  enabled: false\n")
    assert (got["status"], got["skip"]) == ("skip", "not-applicable")


def test_collect_redacts_the_ssm_activation_code():
    # The check declares the NodeConfig as a read, so collect copies it: the SSM activation
    # code must not leave the host (agent/host/redact_secrets.py).
    secret = "Gx7kQ2mZp9Rw4TbN8vLc"
    for name in ("registration-labels-ok", "registration-labels-mime-user-data"):
        path = BUNDLES / name / "root/etc/eks/nodeadm/nodeConfig.yaml"
        text = path.read_text().replace("activationCode: REDACTED", f"activationCode: {secret}")
        assert secret in text
        assert secret not in redact_file("/etc/eks/nodeadm/nodeConfig.yaml", text)


def test_collect_captures_the_sources_and_the_bundle_replays_the_verdict(tmp_path):
    secret = "Gx7kQ2mZp9Rw4TbN8vLc"
    nodeconfig = (BUNDLES / "registration-labels-ok/root/etc/eks/nodeadm/nodeConfig.yaml"
                  ).read_text().replace("activationCode: REDACTED", f"activationCode: {secret}")
    root = tmp_path / "root"
    for rel, text in {
        "etc/eks/nodeadm.d/10-cluster.yaml": nodeconfig,
        "etc/eks/nodeadm.d/20-kubelet.yml": ("apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\n"
                                             "spec:\n  kubelet:\n    flags:\n"
                                             f"    - --node-labels={KEY}=dra\n"),
        "etc/eks/kubelet/environment": 'NODEADM_KUBELET_ARGS="--v=2"',
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    out = tmp_path / "bundle"
    res = run_cli(["collect", "--host-root", str(root), "-o", str(out)])
    assert res.rc == 0, res.err
    captured = {p.relative_to(out).as_posix(): p for p in out.rglob("*") if p.is_file()}
    for rel in ("root/etc/eks/nodeadm.d/10-cluster.yaml", "root/etc/eks/nodeadm.d/20-kubelet.yml",
                "root/etc/eks/kubelet/environment"):
        assert rel in captured, sorted(captured)
    assert not any(secret in p.read_text(errors="replace") for p in captured.values())
    _, got, _ = verdict(["--bundle", str(out)])
    assert got["summary"].endswith(
        f"/etc/eks/nodeadm.d/20-kubelet.yml spec.kubelet.flags --node-labels sets {KEY}=dra")
