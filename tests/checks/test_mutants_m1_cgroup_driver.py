"""containerd-cgroup-driver's collect-time discovery (`Check.discover`, called by
agent/host/collect.py after the static reads): besides what the containerd config imports, a
bundle must carry the kubelet config the kubelet really reads: the file its `--config` flag
names (kubeadm writes the flags to /var/lib/kubelet/kubeadm-flags.env, "Configuring each kubelet
in your cluster using kubeadm", kubernetes.io) first, then the two defaults
(/var/lib/kubelet/config.yaml: kubeadm; /etc/kubernetes/kubelet/config.json: nodeadm).
No other test reached this function, so every mutant in it survived the mutation tier."""
from checks.containerd.cgroup_driver import CONTAINERD_CGROUP_DRIVER
from checks.containerd.config import DEFAULT_CONFIG
from tests.checks.containerd_support import tree

FLAGS = ('KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///run/containerd/'
         'containerd.sock --config=/srv/kubelet/custom.yaml"\n')
CONFIG = 'version = 2\nimports = ["/etc/containerd/extra.toml"]\n'
EXTRA = ('version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
         'BinaryName = "/usr/local/nvidia/toolkit/nvidia-container-runtime"\n')


def test_discover_adds_the_flagged_kubelet_config_then_the_defaults(tmp_path):
    host = tree(tmp_path, {"/var/lib/kubelet/kubeadm-flags.env": FLAGS, DEFAULT_CONFIG: CONFIG,
                           "/etc/containerd/extra.toml": EXTRA})
    discover = CONTAINERD_CGROUP_DRIVER.discover
    assert discover is not None
    reads, presence = discover(host)
    assert list(reads) == [DEFAULT_CONFIG, "/etc/containerd/extra.toml",
                           "/srv/kubelet/custom.yaml", "/var/lib/kubelet/config.yaml",
                           "/etc/kubernetes/kubelet/config.json"]
    assert list(presence) == ["/usr/local/nvidia/toolkit/nvidia-container-runtime"]


def test_discover_without_kubelet_flags_names_the_two_defaults(tmp_path):
    host = tree(tmp_path, {DEFAULT_CONFIG: "version = 2\n"})
    discover = CONTAINERD_CGROUP_DRIVER.discover
    assert discover is not None
    reads, presence = discover(host)
    assert list(reads) == [DEFAULT_CONFIG, "/var/lib/kubelet/config.yaml",
                           "/etc/kubernetes/kubelet/config.json"]
    assert list(presence) == []
