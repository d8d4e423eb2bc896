"""Node name resolution order on fixture trees (docs/kubernetes.md "Node name": config,
nodeadm NodeConfig, kubelet --hostname-override, kubelet client certificate CN, hostname)."""
import pytest

from agent.host.seam import Host
from agent.kube.keymaterial import _cn_with_ssl
from agent.kube.nodename import hostname_override, resolve_node_name
from tests.kube_double import CA

NODECONFIG = """\
apiVersion: node.eks.aws/v1alpha1
kind: NodeConfig
spec:
  cluster:
    name: gpu-cluster
    region: us-west-2
  hybrid:
    nodeName: mi-0123456789abcdef0
    ssm:
      activationCode: REDACTED
      activationId: 00000000-0000-0000-0000-000000000000
"""


def tree(tmp_path, files):
    for rel, content in files.items():
        p = tmp_path / rel.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content if isinstance(content, bytes) else content.encode())
    return Host(str(tmp_path))


@pytest.fixture
def cert_pem(tmp_path):
    ca = CA(str(tmp_path))
    _, _, cert, key = ca.issue("system:node:gpu-host-cert", org="system:nodes")
    return key + cert  # kubelet-client-current.pem holds the key, then the certificate


def test_order(tmp_path, cert_pem):
    files = {
        "/etc/eks/nodeadm/nodeConfig.yaml": NODECONFIG,
        "/etc/eks/kubelet/environment": 'KUBELET_ARGS="--node-ip=10.0.0.5 --hostname-override=gpu-host-override"\n',
        "/var/lib/kubelet/pki/kubelet-client-current.pem": cert_pem,
        "/proc/sys/kernel/hostname": "GPU-Host-Name\n",
    }
    host = tree(tmp_path / "root", files)
    assert resolve_node_name(host, "from-config")[0] == "from-config"
    name, source = resolve_node_name(host)
    assert name == "mi-0123456789abcdef0" and "spec.hybrid.nodeName" in source
    (tmp_path / "root/etc/eks/nodeadm/nodeConfig.yaml").unlink()
    assert resolve_node_name(host)[0] == "gpu-host-override"
    (tmp_path / "root/etc/eks/kubelet/environment").unlink()
    name, source = resolve_node_name(host)
    assert name == "gpu-host-cert" and "certificate CN" in source
    (tmp_path / "root/var/lib/kubelet/pki/kubelet-client-current.pem").unlink()
    assert resolve_node_name(host) == ("gpu-host-name", "hostname")


def test_nodeadm_config_among_other_documents(tmp_path):
    host = tree(tmp_path, {"/etc/eks/nodeadm/config.yaml": "---\nkind: Other\n---\n" + NODECONFIG})
    assert resolve_node_name(host)[0] == "mi-0123456789abcdef0"


def test_nodeadm_config_directory_merges_in_name_order(tmp_path):
    later = NODECONFIG.replace("mi-0123456789abcdef0", "mi-0fedcba9876543210")
    host = tree(tmp_path, {"/etc/eks/nodeadm.d/10-base.yaml": NODECONFIG,
                           "/etc/eks/nodeadm.d/20-override.yaml": later,
                           "/etc/eks/nodeadm.d/30-containerd.yaml": "kind: NodeConfig\nspec: {}\n"})
    name, source = resolve_node_name(host)
    assert name == "mi-0fedcba9876543210" and source.endswith("20-override.yaml)")


@pytest.mark.parametrize("text, want", [
    ('KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///run/containerd/containerd.sock --hostname-override=node-a"', "node-a"),
    ("--kubeconfig=/etc/kubernetes/kubelet.conf\n--hostname-override=node-b\n", "node-b"),
    ("--hostname-override node-c\n# --hostname-override=commented\n", "node-c"),
    ("KUBELET_EXTRA_ARGS=--hostname-override=x --hostname-override=last", "last"),
    ("KUBELET_EXTRA_ARGS=--node-ip=1.2.3.4\n", None),
])
def test_hostname_override_forms(text, want):
    assert hostname_override(text) == want


def test_certificate_without_node_cn_is_ignored(tmp_path):
    pem = CA(str(tmp_path)).issue("kube-apiserver", server=True)[2]
    host = tree(tmp_path / "r", {"/var/lib/kubelet/pki/kubelet-client-current.pem": pem,
                                 "/etc/hostname": "fallback\n"})
    assert resolve_node_name(host) == ("fallback", "hostname")


def test_cn_without_cryptography_uses_the_ssl_decoder(cert_pem):
    assert _cn_with_ssl(cert_pem[cert_pem.index(b"-----BEGIN CERTIFICATE"):]) == "system:node:gpu-host-cert"


def test_nothing_names_the_node(tmp_path):
    name, why = resolve_node_name(tree(tmp_path, {}))
    assert name is None and "kube.node_name" in why
