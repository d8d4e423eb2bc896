"""End to end through CRI: a config containerd-nvidia-runtime passes really starts a pod
sandbox through the stand-in nvidia-container-runtime (proven by its marker file), and a config
it fails does not.

The real containerd daemon (Debian's 1.6, unpacked by .ci/setup.d/30-containerd.sh) runs in a temp root with its own socket;
`restrict_oom_score_adj = true` because this VM lacks CAP_SYS_RESOURCE; the sandbox image is
built locally from a static busybox since no registry is reachable; host network, so no CNI.
"""
import time
from pathlib import Path

import pytest

from agent.config import Config
from agent.host.seam import Host
from agent.safeio.commands import SubprocessCommands
from checks.containerd.containerd_nvidia_runtime import CONTAINERD_NVIDIA_RUNTIME
from checks.policy import ResolvedPolicy, load_policy
from tests.components import component
from tests.conftest import REPO
from tests.integration.containerd.support import Daemon, containerd_16, image_tar, runtime_path

pytestmark = pytest.mark.integration
grpc = pytest.importorskip("grpc", reason="grpcio missing: pip install -e .[test]")
cri = pytest.importorskip("cri_api.v1.api_pb2", reason="container-runtime-interface-api missing")
from cri_api.v1 import api_pb2_grpc  # noqa: E402

UPSTREAM = REPO / "tests/fixtures/containerd/upstream"
IMAGE = "localhost/gna-pause:e2e"
CRI = '[plugins."io.containerd.grpc.v1.cri"]\n'


def environment_keys(work: Path) -> str:
    """CRI settings this VM needs. containerd 1.x replaces the whole CRI table per imported
    file, so every drop-in that defines the table must carry them."""
    return (f'    sandbox_image = "{IMAGE}"\n    restrict_oom_score_adj = true\n'
            f'    [plugins."io.containerd.grpc.v1.cri".cni]\n      bin_dir = "{work}/cni/bin"\n'
            f'      conf_dir = "{work}/cni/conf"\n')


def write_configs(work: Path, wipe: bool) -> Path:
    etc = work / "etc/containerd"
    (etc / "conf.d").mkdir(parents=True)
    (work / "bin").mkdir()
    stand_in = work / "bin/nvidia-container-runtime"
    runc = component("runc")
    stand_in.write_text(f'#!/bin/sh\necho "$*" >> {work}/marker\nexec {runc} "$@"\n')
    stand_in.chmod(0o755)
    (etc / "config.toml").write_text(
        f'version = 2\nroot = "{work}/root"\nstate = "{work}/state"\n'
        f'imports = ["{etc}/conf.d/*.toml"]\n'
        'disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",'
        ' "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper"]\n'
        f'[grpc]\n  address = "{work}/containerd.sock"\n[ttrpc]\n  address = "{work}/containerd.sock.ttrpc"\n'
        f'[plugins."io.containerd.internal.v1.opt"]\n  path = "{work}/opt"\n')
    # nvidia-ctk's own drop-in, its BinaryName pointed at the stand-in.
    dropin = (UPSTREAM / "nvidia-ctk-installer.v2-cdi.after.99-nvidia.toml").read_text()
    dropin = dropin.replace('"/usr/bin/nvidia-container-runtime"', f'"{stand_in}"')
    dropin = dropin.replace(CRI + "    enable_cdi = true\n", CRI + "    enable_cdi = true\n" + environment_keys(work))
    dropin = dropin.replace('[plugins."io.containerd.grpc.v1.cri".containerd]\n',
                            '[plugins."io.containerd.grpc.v1.cri".containerd]\n      snapshotter = "native"\n')
    (etc / "conf.d/99-nvidia.toml").write_text(dropin)
    if wipe:
        # containerd's own merge-test drop-in (runc with SystemdCgroup), imported after ours.
        runc = (UPSTREAM / "containerd2-merge-test.dropin-1-runc.toml").read_text()
        runc = runc.replace("SystemdCgroup = true", "SystemdCgroup = false")
        (etc / "conf.d/zz-runc.toml").write_text(
            CRI + environment_keys(work)
            + '[plugins."io.containerd.grpc.v1.cri".containerd]\n  snapshotter = "native"\n' + runc)
    return etc / "config.toml"


def run_sandbox(socket: Path, handler: str, uid: str):
    channel = grpc.insecure_channel(f"unix://{socket}")
    rt = api_pb2_grpc.RuntimeServiceStub(channel)
    config = cri.PodSandboxConfig(
        metadata=cri.PodSandboxMetadata(name=f"e2e-{handler}", uid=uid, namespace="default"),
        linux=cri.LinuxPodSandboxConfig(security_context=cri.LinuxSandboxSecurityContext(
            namespace_options=cri.NamespaceOption(network=cri.NODE))))
    try:
        resp = rt.RunPodSandbox(cri.RunPodSandboxRequest(config=config, runtime_handler=handler), timeout=60)
        status = rt.PodSandboxStatus(cri.PodSandboxStatusRequest(pod_sandbox_id=resp.pod_sandbox_id), timeout=10)
        rt.StopPodSandbox(cri.StopPodSandboxRequest(pod_sandbox_id=resp.pod_sandbox_id), timeout=30)
        rt.RemovePodSandbox(cri.RemovePodSandboxRequest(pod_sandbox_id=resp.pod_sandbox_id), timeout=30)
        return status.status.runtime_handler, None
    except grpc.RpcError as exc:
        return None, exc.details()
    finally:
        channel.close()


@pytest.mark.parametrize("wipe", [False, True], ids=["check-passes", "check-fails"])
def test_check_verdict_matches_what_the_real_daemon_does(tmp_path, monkeypatch, wipe):
    binary = containerd_16()
    # The check runs `containerd config dump` from PATH: this 1.6, never the machine's own.
    monkeypatch.setenv("PATH", runtime_path(binary))
    work = tmp_path
    config = write_configs(work, wipe)
    settings = Config(containerd={"config_path": str(config)}).model_dump()
    verdict = CONTAINERD_NVIDIA_RUNTIME.run(
        Host("/", commands=SubprocessCommands()), ResolvedPolicy(load_policy(1), "device-plugin", settings=settings))
    assert verdict.details["source"] == "containerd config dump"
    daemon = Daemon(binary, config, work)
    started = time.monotonic()
    try:
        daemon.start()
        imp = daemon.ctr("images", "import", "--snapshotter", "native", str(image_tar(work / "img.tar", IMAGE)))
        assert imp.returncode == 0, imp.stderr
        handler, error = run_sandbox(daemon.socket, "nvidia", f"uid-nvidia-{wipe}")
        if not wipe:
            assert verdict.status == "pass", verdict.summary
            assert error is None, f"{error}\n{daemon.log_tail()}"
            assert handler == "nvidia"
            marker = (work / "marker").read_text()
            assert " create --bundle " in marker and " start " in marker
        else:
            assert verdict.status == "fail" and "replaces the whole CRI plugin table" in verdict.summary
            assert error is not None and 'no runtime for "nvidia" is configured' in error
            assert not (work / "marker").exists()
            # The daemon itself works: the default runc handler starts a sandbox.
            handler, error = run_sandbox(daemon.socket, "runc", "uid-runc")
            assert error is None and handler == "runc", error
    finally:
        daemon.stop()
    assert time.monotonic() - started < 120
