"""The kubelet's kubeconfig found without configuration, against the HTTPS API double.

Canonical Kubernetes (canonical/k8s-snap) and kubeadm keep the kubelet's kubeconfig at
/etc/kubernetes/kubelet.conf; EKS nodeadm at /var/lib/kubelet/kubeconfig, the setting's default.
The search order is the module's table (agent/kube/kubeconfig_path.py); the tests move it
under tmp_path, since this machine's /etc is not theirs to write.
"""
import pytest

from agent.config import Config
from agent.kube import kubeconfig_path
from agent.kube.kubeconfig import KubeconfigError
from agent.kube.session import KubeSession
from agent.outputs.node.verdict import check_verdict
from tests.conftest import run_cli
from tests.kube_double import KubeDouble, kubeconfig_yaml
from tests.kube_setup import NODE
from tests.unit.metrics_fixtures import report

TOKEN = "snap-kubelet-token"


@pytest.fixture
def api(tmp_path):
    double = KubeDouble(str(tmp_path)).start()
    try:
        double.add_node(NODE)
        # k8sd writes kubelet.conf with a token for system:node:<name> (setupKubeconfigs).
        double.add_token(TOKEN, f"system:node:{NODE}")
        yield double
    finally:
        double.stop()


@pytest.fixture
def layout(tmp_path, monkeypatch):
    eks = tmp_path / "var/lib/kubelet/kubeconfig"
    snap = tmp_path / "etc/kubernetes/kubelet.conf"
    monkeypatch.setattr(kubeconfig_path, "KUBELET_KUBECONFIGS", (
        (str(eks), "EKS nodeadm"), (str(snap), "kubeadm and Canonical Kubernetes")))
    return eks, snap


def unconfigured() -> Config:
    # kube.kubeconfig left out, as on a host configured with nothing but the Node name
    return Config.model_validate({"kube": {"node_name": NODE, "request_timeout": 2}})


def test_a_snap_layout_host_gets_its_node_verdict_without_configuration(api, layout):
    eks, snap = layout
    snap.parent.mkdir(parents=True)
    snap.write_text(kubeconfig_yaml(api.url, api.ca.path, {"token": TOKEN}))
    config = unconfigured()
    session = KubeSession(config.kube)
    try:
        result = check_verdict(config, report(), session=session)
    finally:
        session.close()
    assert result.error is None and result.read, result.error
    assert result.node == NODE
    lines = result.lines()
    assert lines[1] == (f"kubeconfig: {snap} (kubeadm and Canonical Kubernetes location; "
                        f"kube.kubeconfig left at its default, {eks} absent)")
    assert any(line.startswith("condition: GPUReady=") for line in lines)
    doc = result.as_dict()  # what `check --format json` puts under context.kube
    assert doc["kubeconfig"] == str(snap)
    assert doc["kubeconfig_source"].startswith("kubeadm and Canonical Kubernetes location")
    assert [e["method"] for e in api.log] == ["GET"]  # the Node read; nothing written


def test_the_default_location_wins_when_both_exist(api, layout):
    eks, snap = layout
    for path in (eks, snap):
        path.parent.mkdir(parents=True)
        path.write_text(kubeconfig_yaml(api.url, api.ca.path, {"token": TOKEN}))
    chosen = kubeconfig_path.choose(unconfigured().kube)
    assert (chosen.path, chosen.source) == (str(eks), "kube.kubeconfig default (EKS nodeadm)")


def test_none_found_names_where_it_looked(layout):
    eks, snap = layout
    with pytest.raises(KubeconfigError) as err:
        kubeconfig_path.choose(unconfigured().kube)
    assert str(err.value) == (f"no kubelet kubeconfig found (looked at {eks}, {snap}): the node "
                              "has not joined yet, or set kube.kubeconfig to the kubelet's "
                              "--kubeconfig")


def test_a_directory_at_a_location_is_not_a_kubeconfig(api, layout):
    eks, snap = layout
    eks.mkdir(parents=True)  # not a regular file: passed over
    snap.parent.mkdir(parents=True)
    snap.write_text(kubeconfig_yaml(api.url, api.ca.path, {"token": TOKEN}))
    assert kubeconfig_path.choose(unconfigured().kube).path == str(snap)


def test_a_configured_kubeconfig_is_used_as_given_and_never_searched(api, layout, tmp_path):
    eks, snap = layout
    snap.parent.mkdir(parents=True)
    snap.write_text(kubeconfig_yaml(api.url, api.ca.path, {"token": TOKEN}))
    gone = tmp_path / "elsewhere" / "kubeconfig"
    config = Config.model_validate({"kube": {"kubeconfig": str(gone), "node_name": NODE}})
    with pytest.raises(KubeconfigError) as err:
        kubeconfig_path.choose(config.kube)
    assert str(err.value).startswith(f"field 'kube.kubeconfig': {gone}: no such file")
    # Written in the config with the default's own value: still explicit, still no search.
    same = Config.model_validate({"kube": {"kubeconfig": str(eks)}})
    assert kubeconfig_path.explicit(same.kube)
    assert not kubeconfig_path.explicit(Config().kube)


def test_check_refuses_a_configured_kubeconfig_that_does_not_exist(tmp_path):
    gone = tmp_path / "nope.conf"
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"kube:\n  kubeconfig: {gone}\n")
    res = run_cli(["check", "--config", str(cfg), "--path", "dra"])
    assert res.rc == 2
    assert res.err == (f"gpu-node-agent: error: {cfg}: field 'kube.kubeconfig': {gone}: no such "
                       "file (a configured kubeconfig is used as given; leave the field out to "
                       "use the kubelet's, wherever the platform keeps it)\n")
    assert res.out == ""
    # The Node verdict off: nothing to read the kubeconfig for, nothing refused.
    assert kubeconfig_path.configured_but_missing(
        Config.model_validate({"kube": {"kubeconfig": str(gone), "enabled": False}}),
        str(cfg)) is None
