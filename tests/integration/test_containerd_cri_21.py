"""End to end through CRI on containerd 2.1 (Debian forky's, unpacked by
.ci/setup.d/30-containerd.sh, not installed), as tests/integration/test_containerd_cri.py does
on 1.6: where containerd-nvidia-runtime and containerd-cdi pass, a pod sandbox really starts
through the `nvidia` handler (the stand-in nvidia-container-runtime leaves its marker file)
and a container asking for the CDI device nvidia.com/gpu=0 (CRI's CDI_devices field, the one
the kubelet fills from a device plugin's or DRA driver's answer) gets the spec's edits; where
the check fails, containerd has no such runtime.

Config version 3 (containerd 2.x, docs/cri/config.md): runtimes, CDI and CNI under
plugins."io.containerd.cri.v1.runtime", the sandbox image under
plugins."io.containerd.cri.v1.images".pinned_images. `restrict_oom_score_adj = true` because
this VM lacks CAP_SYS_RESOURCE; the image is built locally (no registry is reachable); host
network, so no CNI. Every call has a timeout; the daemon is stopped by PID.
"""
import json
import time
from pathlib import Path

import pytest

from agent.config import Config
from agent.host.seam import Host
from agent.safeio.commands import SubprocessCommands
from checks.containerd.containerd_cdi import CONTAINERD_CDI
from checks.containerd.containerd_nvidia_runtime import CONTAINERD_NVIDIA_RUNTIME
from checks.policy import ResolvedPolicy, load_policy
from tests.components import component
from tests.integration.containerd.support import Daemon, containerd_21, image_tar, runtime_path

pytestmark = pytest.mark.integration
grpc = pytest.importorskip("grpc", reason="grpcio missing: pip install -e .[test]")
cri = pytest.importorskip("cri_api.v1.api_pb2", reason="container-runtime-interface-api missing")
from cri_api.v1 import api_pb2_grpc  # noqa: E402

IMAGE = "localhost/gna-pause:e2e"
MARK = "GNA_CDI_INJECTED=gpu0"
RUNTIME = "io.containerd.cri.v1.runtime"
DISABLED = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
            "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.erofs",
            "io.containerd.snapshotter.v1.blockfile"]


def write(work: Path, handler_table: str) -> Path:
    """A version-3 config whose `nvidia` runtime lives in ``handler_table``: the v3 runtime
    plugin (right) or the version-2 CRI table (wrong: containerd 2.x ignores it in a
    version-3 file)."""
    (work / "bin").mkdir()
    (work / "cdi").mkdir()
    stand_in = work / "bin/nvidia-container-runtime"
    stand_in.write_text(f'#!/bin/sh\necho "$*" >> {work}/marker\nexec {component("runc")} "$@"\n')
    stand_in.chmod(0o755)
    spec = {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu",
            "devices": [{"name": "0", "containerEdits": {"env": [MARK]}}]}
    (work / "cdi/nvidia.yaml").write_text(json.dumps(spec))  # JSON is YAML
    config = work / "config.toml"
    config.write_text(
        f'version = 3\nroot = "{work}/root"\nstate = "{work}/state"\n'
        f"disabled_plugins = {json.dumps(DISABLED)}\n"
        f'[grpc]\n  address = "{work}/containerd.sock"\n'
        f'[ttrpc]\n  address = "{work}/containerd.sock.ttrpc"\n'
        # The transfer service `ctr images import` uses unpacks only for the platforms
        # listed (2.x; overlayfs, its default snapshotter, is not usable in this VM).
        '[[plugins."io.containerd.transfer.v1.local".unpack_config]]\n'
        '  platform = "linux/amd64"\n  snapshotter = "native"\n'
        '[plugins."io.containerd.cri.v1.images"]\n  snapshotter = "native"\n'
        f'[plugins."io.containerd.cri.v1.images".pinned_images]\n  sandbox = "{IMAGE}"\n'
        f'[plugins."{RUNTIME}"]\n  enable_cdi = true\n'
        f'  cdi_spec_dirs = ["{work}/cdi", "/var/run/cdi"]\n  restrict_oom_score_adj = true\n'
        f'[plugins."{RUNTIME}".cni]\n  bin_dirs = ["{work}/cni/bin"]\n'
        f'  conf_dir = "{work}/cni/conf"\n'
        f'[plugins."{handler_table}".containerd.runtimes.nvidia]\n'
        '  runtime_type = "io.containerd.runc.v2"\n'
        f'[plugins."{handler_table}".containerd.runtimes.nvidia.options]\n'
        f'  BinaryName = "{stand_in}"\n')
    return config


def sandbox_and_container(socket: Path, handler: str):
    """(runtime handler of the sandbox, env of a container asking for nvidia.com/gpu=0) or
    (None, the CRI error)."""
    channel = grpc.insecure_channel(f"unix://{socket}")
    rt = api_pb2_grpc.RuntimeServiceStub(channel)
    ns = cri.NamespaceOption(network=cri.NODE)
    pod = cri.PodSandboxConfig(
        metadata=cri.PodSandboxMetadata(name=f"e2e-{handler}", uid=f"uid-{handler}", namespace="default"),
        linux=cri.LinuxPodSandboxConfig(security_context=cri.LinuxSandboxSecurityContext(namespace_options=ns)))
    try:
        sandbox = rt.RunPodSandbox(cri.RunPodSandboxRequest(config=pod, runtime_handler=handler),
                                   timeout=60).pod_sandbox_id
    except grpc.RpcError as exc:
        channel.close()
        return None, exc.details()
    try:
        status = rt.PodSandboxStatus(cri.PodSandboxStatusRequest(pod_sandbox_id=sandbox), timeout=10)
        ctr = cri.ContainerConfig(
            metadata=cri.ContainerMetadata(name="gpu"), image=cri.ImageSpec(image=IMAGE),
            command=["/bin/sleep", "30"], CDI_devices=[cri.CDIDevice(name="nvidia.com/gpu=0")],
            linux=cri.LinuxContainerConfig(security_context=cri.LinuxContainerSecurityContext(
                namespace_options=ns)))
        cid = rt.CreateContainer(cri.CreateContainerRequest(
            pod_sandbox_id=sandbox, config=ctr, sandbox_config=pod), timeout=60).container_id
        info = rt.ContainerStatus(cri.ContainerStatusRequest(container_id=cid, verbose=True), timeout=10).info
        env = json.loads(info["info"])["runtimeSpec"]["process"]["env"]
        rt.RemoveContainer(cri.RemoveContainerRequest(container_id=cid), timeout=30)
        return status.status.runtime_handler, list(env)
    finally:
        rt.StopPodSandbox(cri.StopPodSandboxRequest(pod_sandbox_id=sandbox), timeout=30)
        rt.RemovePodSandbox(cri.RemovePodSandboxRequest(pod_sandbox_id=sandbox), timeout=30)
        channel.close()


@pytest.mark.parametrize("table", [RUNTIME, "io.containerd.grpc.v1.cri"],
                         ids=["check-passes", "handler-in-v2-table"])
def test_verdicts_match_what_containerd_21_does(tmp_path, monkeypatch, table):
    binary = containerd_21()
    # The checks run `containerd config dump` from PATH: this 2.1, never the machine's own.
    monkeypatch.setenv("PATH", runtime_path(binary))
    config = write(tmp_path, table)
    settings = Config(containerd={"config_path": str(config)}).model_dump()
    host = Host("/", commands=SubprocessCommands())
    handler_verdict = CONTAINERD_NVIDIA_RUNTIME.run(
        host, ResolvedPolicy(load_policy(2), "device-plugin", settings=settings))
    cdi_verdict = CONTAINERD_CDI.run(host, ResolvedPolicy(load_policy(2), "dra", settings=settings))
    assert handler_verdict.details["source"] == "containerd config dump"
    assert handler_verdict.details["containerd_version"].startswith("2.1.")
    assert cdi_verdict.status == "pass", cdi_verdict.summary
    daemon = Daemon(binary, config, tmp_path)
    started = time.monotonic()
    try:
        daemon.start()
        imp = daemon.ctr("images", "import", "--snapshotter", "native",
                         str(image_tar(tmp_path / "img.tar", IMAGE)))
        assert imp.returncode == 0, imp.stderr
        handler, answer = sandbox_and_container(daemon.socket, "nvidia")
        if table == RUNTIME:
            assert handler_verdict.status == "pass", handler_verdict.summary
            assert handler == "nvidia", f"{answer}\n{daemon.log_tail()}"
            assert MARK in answer  # the CDI device's edits reached the container
            marker = (tmp_path / "marker").read_text()
            assert " create --bundle " in marker and " start " in marker
        else:
            assert handler_verdict.status == "fail" and handler_verdict.code == "handler-missing"
            assert handler is None and 'no runtime for "nvidia" is configured' in answer
            assert not (tmp_path / "marker").exists()
            # The daemon itself works: the default runc handler starts the same pod.
            handler, env = sandbox_and_container(daemon.socket, "runc")
            assert handler == "runc" and MARK in env, env
    finally:
        daemon.stop()
    assert time.monotonic() - started < 60
