"""Policy version 2's container-runtime verdicts on their fixture bundles and on small trees:
the cgroup-driver comparison, RuntimeClass handlers against containerd's effective runtimes,
nodeadm's partial CRI table, Canonical Kubernetes' recorded containerd config, the 2.x
migration of a version-2 table. Expected values are written by hand from the sources the
modules cite (KEP-4033; kubelet's cgroupDriver default cgroupfs; containerd's
plugins/cri/runtime and images plugin.go migrations; k8s-snap's arguments file format)."""
from agent.config import Config
from checks.containerd.cgroup_driver import CONTAINERD_CGROUP_DRIVER, kubelet_driver
from checks.containerd.containerd_cdi import CONTAINERD_CDI
from checks.containerd.containerd_nvidia_runtime import CONTAINERD_NVIDIA_RUNTIME
from checks.containerd.effective import config_location
from checks.containerd.migrate import CRI_V3_IMAGES, CRI_V3_RUNTIME, migrate_to_v3
from checks.containerd.snap import snap_config
from checks.policy import ResolvedPolicy, load_policy
from checks.runtimeclass_handler import RUNTIMECLASS_HANDLER
from tests.checks.bundle_support import run_on_bundle
from tests.checks.containerd_support import V2X, V16, tree


def run(check, name, version=2, path="device-plugin", **settings):
    pol = ResolvedPolicy(load_policy(version), path, settings=Config(**settings).model_dump())
    return run_on_bundle(check, name, pol)


# --- containerd-cgroup-driver -------------------------------------------------------------

def test_cgroup_driver_verdicts_on_their_bundles():
    ok = run(CONTAINERD_CGROUP_DRIVER, "containerd-cgroup-driver-ok-21")
    assert ok.status == "pass" and ok.details["default_runtime"] == "runc"
    assert ok.details["kubelet_version"] == "1.34.2"
    out = run(CONTAINERD_CGROUP_DRIVER, "containerd-cgroup-driver-differs-from-default")
    assert (out.status, out.code) == ("fail", "nvidia-cgroup-differs-from-default")
    assert "SystemdCgroup = false but the default runtime 'runc' has true" in out.summary
    assert out.remediation.startswith("Set SystemdCgroup = true in the 'nvidia' runtime's options")
    out = run(CONTAINERD_CGROUP_DRIVER, "containerd-cgroup-driver-differs-from-kubelet")
    assert (out.status, out.code) == ("fail", "nvidia-cgroup-differs-from-kubelet")
    assert out.details["kubelet_cgroup_driver"] == "systemd"
    assert "GPU pods fail at start" in out.summary
    out = run(CONTAINERD_CGROUP_DRIVER, "containerd-cgroup-driver-kubelet-config-unreadable")
    assert (out.status, out.code) == ("unknown", "kubelet-config-unreadable")
    assert "/var/lib/kubelet/config.yaml" in out.summary
    out = run(CONTAINERD_CGROUP_DRIVER, "containerd-cgroup-driver-version-decides")
    assert (out.status, out.code) == ("unknown", "verdict-depends-on-version")
    assert out.details["verdicts"] == {"1": "fail", "2": "pass"}


def test_cgroup_driver_is_a_version_2_gate():
    assert CONTAINERD_CGROUP_DRIVER.since_policy == 2
    assert CONTAINERD_CGROUP_DRIVER.requires == ("containerd-nvidia-runtime",)


def test_kubelet_without_a_config_is_input_missing(tmp_path):
    host = tree(tmp_path, {"/etc/containerd/config.toml": "version = 2\n"}, V16)
    assert kubelet_driver(host) == (None, "absent: no kubelet config (/var/lib/kubelet/config.yaml, "
                                          "/etc/kubernetes/kubelet/config.json)")


def test_kubelet_flag_wins_and_config_flag_is_followed(tmp_path):
    # nodeadm's kubelet environment names its config.json; an unset cgroupDriver is cgroupfs
    host = tree(tmp_path, {
        "/etc/eks/kubelet/environment": 'NODEADM_KUBELET_ARGS="--config=/etc/k/kc.json --v=2"\n',
        "/etc/k/kc.json": '{"kind": "KubeletConfiguration"}',
        "/var/lib/kubelet/config.yaml": "cgroupDriver: systemd\n"})
    assert kubelet_driver(host) == ("cgroupfs", "/etc/k/kc.json (cgroupDriver unset: cgroupfs)")
    host = tree(tmp_path / "b", {"/var/lib/kubelet/kubeadm-flags.env":
                                 'KUBELET_KUBEADM_ARGS="--cgroup-driver=systemd"\n',
                                 "/var/lib/kubelet/config.yaml": "cgroupDriver: cgroupfs\n"})
    assert kubelet_driver(host) == ("systemd", "the kubelet's --cgroup-driver argument")


# --- runtimeclass-handler against containerd's effective runtimes -------------------------

def test_runtimeclass_handler_that_containerd_has_passes_in_both_versions():
    for version in (1, 2):
        out = run(RUNTIMECLASS_HANDLER, "runtimeclass-handler-effective-nvidia-cdi", version)
        assert out.status == "pass", out.summary
        assert out.details["containerd_runtimes"] == ["nvidia", "nvidia-cdi", "nvidia-legacy", "runc"]


def test_runtimeclass_handler_containerd_lacks_fails_under_2_only():
    out = run(RUNTIMECLASS_HANDLER, "runtimeclass-handler-not-in-containerd", 2)
    assert (out.status, out.code) == ("fail", "handler-mismatch")
    # containerd 1.7 replaced the root's CRI table with the drop-in's: runc went with it
    assert "does not have (containerd has: nvidia-cdi)" in out.summary
    out = run(RUNTIMECLASS_HANDLER, "runtimeclass-handler-not-in-containerd", 1)
    assert out.status == "pass"  # version 1: the handler is the configured containerd.handler


def test_runtimeclass_without_containerd_config_keeps_the_name_comparison():
    out = run(RUNTIMECLASS_HANDLER, "kube-runtimeclass-handler-mismatch", 2)
    assert out.status == "fail" and "containerd's runtime is 'nvidia'" in out.summary
    assert out.details["containerd_runtimes"] is None


# --- nodeadm's partial CRI table ---------------------------------------------------------

def test_partial_cri_table_warns_under_2_and_is_named_under_1():
    out = run(CONTAINERD_NVIDIA_RUNTIME, "containerd-nodeadm-partial-cri-table", 2)
    assert (out.status, out.code) == ("warn", "nodeadm-partial-cri-table")
    found = out.details["nodeadm_partial_cri_table"]
    assert found["file"] == "/etc/containerd/config.d/00-nodeadm.toml"
    # our merge has no defaults: everything nodeadm's template set in the CRI table is gone
    assert set(found["removes"]) == {
        "sandbox_image", "registry.config_path", "cni.bin_dir", "cni.conf_dir",
        "containerd.default_runtime_name", "containerd.discard_unpacked_layers",
        "containerd.runtimes.runc.runtime_type", "containerd.runtimes.runc.options.SystemdCgroup"}
    out = run(CONTAINERD_NVIDIA_RUNTIME, "containerd-nodeadm-partial-cri-table", 1)
    assert out.status == "pass" and "nodeadm_partial_cri_table" in out.details


def test_partial_cri_table_is_not_reported_under_2x_merging(tmp_path):
    root = (tmp_path / "x")
    files = {"/etc/containerd/config.toml": 'version = 2\nimports = ["/etc/containerd/config.d/*.toml"]\n'
             '[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "p:1"\n',
             "/etc/containerd/config.d/00-nodeadm.toml":
             '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
             '  runtime_type = "io.containerd.runc.v2"\n'
             '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
             '  BinaryName = "/usr/bin/nvidia-container-runtime"\n'}
    pol = ResolvedPolicy(load_policy(2), "device-plugin", settings=Config().model_dump())
    out = CONTAINERD_NVIDIA_RUNTIME.run(
        tree(root, files, V2X, execs=("/usr/bin/nvidia-container-runtime",)), pol)
    assert out.status == "pass" and "nodeadm_partial_cri_table" not in out.details


# --- Canonical Kubernetes ------------------------------------------------------------------

def test_snap_records_name_the_config():
    for check in (CONTAINERD_NVIDIA_RUNTIME, CONTAINERD_CDI):
        out = run(check, "containerd-k8s-snap-base-dir", path="dra")
        assert out.status == "pass", out.summary
        assert out.details["config_path"] == "/ck8s/etc/containerd/config.toml"
        assert out.details["config_from"] == "k8s snap: /var/snap/k8s/common/args/containerd --config"
        assert out.details["containerd_version"] == "1.7.27"


def test_snap_config_elsewhere_is_unknown_never_built_in_defaults():
    for check in (CONTAINERD_NVIDIA_RUNTIME, CONTAINERD_CDI):
        out = run(check, "containerd-k8s-snap-config-elsewhere", path="dra")
        assert (out.status, out.code) == ("unknown", "config-not-found")
        assert "built-in defaults" not in out.summary.replace("not on built-in defaults", "")
        assert out.details["looked_at"] == ["/ck8s/etc/containerd/config.toml",
                                            "/var/snap/k8s/common/args/containerd --config"]


def test_configured_path_wins_over_the_snap_and_quotes_are_stripped(tmp_path):
    host = tree(tmp_path, {"/var/snap/k8s/common/args/containerd": '--config="/x/etc/containerd/config.toml"\n'})
    assert snap_config(host) == ("/x/etc/containerd/config.toml",
                                 "/var/snap/k8s/common/args/containerd --config")
    pol = ResolvedPolicy(load_policy(2), "dra",
                         settings=Config(containerd={"config_path": "/y/config.toml"}).model_dump())
    assert config_location(host, pol) == ("/y/config.toml", "containerd.config_path")
    lock = tree(tmp_path / "l", {"/var/snap/k8s/common/lock/containerd-config-dir": "/z/etc/containerd\n"})
    assert snap_config(lock) == ("/z/etc/containerd/config.toml",
                                 "/var/snap/k8s/common/lock/containerd-config-dir")


# --- containerd 2.x's migration of a version-2 CRI table ----------------------------------

def test_migration_moves_runtime_and_image_keys_as_containerd_does():
    data = {"version": 2, "plugins": {
        "io.containerd.grpc.v1.cri": {
            "sandbox_image": "p:1", "enable_cdi": True, "stream_server_port": "0",
            "registry": {"config_path": "/etc/containerd/certs.d"},
            "cni": {"bin_dir": "/opt/cni/bin", "conf_dir": "/etc/cni/net.d"},
            "containerd": {"snapshotter": "native", "default_runtime_name": "runc",
                           "runtimes": {"runc": {"runtime_type": "io.containerd.runc.v2"}}}},
        CRI_V3_RUNTIME: {"containerd": {"runtimes": {"nvidia": {}}}}}}
    migrate_to_v3(data)
    assert data["version"] == 3
    runtime = data["plugins"][CRI_V3_RUNTIME]
    assert runtime["enable_cdi"] is True and "stream_server_port" not in runtime
    assert runtime["cni"] == {"bin_dirs": ["/opt/cni/bin"], "conf_dir": "/etc/cni/net.d"}
    # a key the version-3 table already has wins: its runtimes stay, runc is not added
    assert runtime["containerd"] == {"runtimes": {"nvidia": {}}, "default_runtime_name": "runc"}
    images = data["plugins"][CRI_V3_IMAGES]
    assert images == {"pinned_images": {"sandbox": "p:1"}, "snapshotter": "native",
                      "registry": {"config_path": "/etc/containerd/certs.d"}}
