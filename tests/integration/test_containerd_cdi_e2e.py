"""End to end with Debian trixie's containerd 1.7 (unpacked, not installed): where
containerd-cdi passes, a container asking for nvidia.com/gpu=0 through CDI really gets the
spec's edits; where it fails (enable_cdi left at 1.7's default), containerd ignores the
request."""
import json
import os
from pathlib import Path

import pytest

from agent.config import Config
from agent.host.seam import Host
from checks.containerd.containerd_cdi import CONTAINERD_CDI
from checks.policy import ResolvedPolicy, load_policy
from tests.integration.containerd.support import BinaryAs, Daemon, containerd_17, image_tar

pytestmark = pytest.mark.integration
grpc = pytest.importorskip("grpc", reason="grpcio missing: pip install -e .[test]")
cri = pytest.importorskip("cri_api.v1.api_pb2", reason="container-runtime-interface-api missing")
from cri_api.v1 import api_pb2_grpc  # noqa: E402

IMAGE = "localhost/gna-pause:e2e"
MARK = "GNA_CDI_INJECTED=gpu0"


def write(work: Path, enable: bool) -> Path:
    (work / "cdi").mkdir()
    spec = {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu",
            "devices": [{"name": "0", "containerEdits": {"env": [MARK]}}]}
    (work / "cdi/nvidia.yaml").write_text(json.dumps(spec))  # JSON is YAML
    cri_table = '[plugins."io.containerd.grpc.v1.cri"]\n'
    config = work / "config.toml"
    config.write_text(
        f'version = 2\nroot = "{work}/root"\nstate = "{work}/state"\n'
        'disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",'
        ' "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper"]\n'
        f'[grpc]\n  address = "{work}/containerd.sock"\n[ttrpc]\n  address = "{work}/containerd.sock.ttrpc"\n'
        f'[plugins."io.containerd.internal.v1.opt"]\n  path = "{work}/opt"\n'
        + cri_table
        + ("  enable_cdi = true\n" if enable else "")
        + f'  cdi_spec_dirs = ["{work}/cdi", "/var/run/cdi"]\n'
        f'  sandbox_image = "{IMAGE}"\n  restrict_oom_score_adj = true\n'
        f'  [plugins."io.containerd.grpc.v1.cri".containerd]\n    snapshotter = "native"\n'
        f'  [plugins."io.containerd.grpc.v1.cri".cni]\n    bin_dir = "{work}/cni/bin"\n'
        f'    conf_dir = "{work}/cni/conf"\n')
    return config


def container_env(socket: Path) -> list:
    channel = grpc.insecure_channel(f"unix://{socket}")
    rt = api_pb2_grpc.RuntimeServiceStub(channel)
    ns = cri.NamespaceOption(network=cri.NODE)
    pod = cri.PodSandboxConfig(
        metadata=cri.PodSandboxMetadata(name="cdi", uid="uid-cdi", namespace="default"),
        linux=cri.LinuxPodSandboxConfig(security_context=cri.LinuxSandboxSecurityContext(namespace_options=ns)))
    sandbox = rt.RunPodSandbox(cri.RunPodSandboxRequest(config=pod), timeout=60).pod_sandbox_id
    try:
        ctr = cri.ContainerConfig(
            metadata=cri.ContainerMetadata(name="gpu"), image=cri.ImageSpec(image=IMAGE),
            command=["/bin/sleep", "30"],
            # The CDI device request kubelet's device plugin / DRA path sends (annotation form,
            # honoured by containerd 1.7 when enable_cdi is true).
            annotations={"cdi.k8s.io/gna-e2e": "nvidia.com/gpu=0"},
            linux=cri.LinuxContainerConfig(security_context=cri.LinuxContainerSecurityContext(
                namespace_options=ns)))
        cid = rt.CreateContainer(cri.CreateContainerRequest(
            pod_sandbox_id=sandbox, config=ctr, sandbox_config=pod), timeout=60).container_id
        info = rt.ContainerStatus(cri.ContainerStatusRequest(container_id=cid, verbose=True), timeout=10).info
        spec = json.loads(info["info"])["runtimeSpec"]
        rt.RemoveContainer(cri.RemoveContainerRequest(container_id=cid), timeout=30)
        return list(spec["process"]["env"])
    finally:
        rt.StopPodSandbox(cri.StopPodSandboxRequest(pod_sandbox_id=sandbox), timeout=30)
        rt.RemovePodSandbox(cri.RemovePodSandboxRequest(pod_sandbox_id=sandbox), timeout=30)
        channel.close()


@pytest.mark.parametrize("enable", [True, False], ids=["cdi-enabled", "cdi-default-off"])
def test_containerd_cdi_verdict_matches_real_injection(tmp_path, monkeypatch, enable):
    binary = containerd_17()
    config = write(tmp_path, enable)
    settings = Config(containerd={"config_path": str(config)}).model_dump()
    verdict = CONTAINERD_CDI.run(Host("/", commands=BinaryAs(binary)),
                                 ResolvedPolicy(load_policy(1), "dra", settings=settings))
    assert verdict.details["source"] == "containerd config dump"
    assert verdict.details["containerd_version"].startswith("1.7.")
    daemon = Daemon(binary, config, tmp_path)
    # The 1.7 shim beside the binary, so the whole stack is trixie's.
    monkeypatch.setenv("PATH", f"{Path(binary).parent}:{os.environ['PATH']}")
    try:
        daemon.start()
        imp = daemon.ctr("images", "import", "--snapshotter", "native", str(image_tar(tmp_path / "img.tar", IMAGE)))
        assert imp.returncode == 0, imp.stderr
        env = container_env(daemon.socket)
    finally:
        daemon.stop()
    if enable:
        assert verdict.status == "pass", verdict.summary
        assert MARK in env
    else:
        assert verdict.status == "fail" and "1.7 defaults it to false" in verdict.summary
        assert MARK not in env
