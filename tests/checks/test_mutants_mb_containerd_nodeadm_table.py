"""nodeadm's partial CRI table (checks/containerd/nodeadm_table.py), the finding in full.

By hand from the module's sources: under containerd 1.x an imported file's plugin table
replaces the whole table (containerd-config.toml(5), "imports"), so every CRI setting the root
config.toml made that 00-nodeadm.toml does not make itself is gone; containerd's `config dump`
prints its default in its place, our own merge has none. The check reports the finding in
details and, on policy version 2 with a known 1.x containerd, warns.
"""

from agent.config import Config
from agent.host.seam import Host
from agent.hostview import CommandResult
from checks.containerd.containerd_nvidia_runtime import CONTAINERD_NVIDIA_RUNTIME
from checks.policy import ResolvedPolicy, load_policy
from tests.checks.answers_support import Answers
from tests.checks.containerd_support import V17, tree, write_files

ROOT = "/etc/containerd/config.toml"
DROPIN = "/etc/containerd/config.d/00-nodeadm.toml"
CRI = 'plugins."io.containerd.grpc.v1.cri"'
NCR = "/usr/bin/nvidia-container-runtime"
NVIDIA = (f'[{CRI}.containerd.runtimes.nvidia]\nruntime_type = "io.containerd.runc.v2"\n'
          f'[{CRI}.containerd.runtimes.nvidia.options]\nBinaryName = "{NCR}"\n')
ROOT_TEXT = ('version = 2\nimports = ["/etc/containerd/config.d/*.toml"]\n'
             f'[{CRI}]\nsandbox_image = "p:1"\nenable_cdi = false\n'
             f'[{CRI}.registry]\nconfig_path = "/etc/containerd/certs.d"\n'
             f'[{CRI}.cni]\nbin_dir = "/opt/cni/bin"\n')
DROPIN_TEXT = f'version = 2\n[{CRI}.cni]\nbin_dir = "/opt/nodeadm/bin"\n' + NVIDIA


def v2() -> ResolvedPolicy:
    return ResolvedPolicy(load_policy(2), "device-plugin", settings=Config().model_dump())


def run(h):
    return CONTAINERD_NVIDIA_RUNTIME.run(h, v2())


def test_our_merge_names_every_root_setting_the_dropin_takes_away(tmp_path):
    out = run(tree(tmp_path, {ROOT: ROOT_TEXT, DROPIN: DROPIN_TEXT}, V17, execs=(NCR,)))
    assert (out.status, out.code) == ("warn", "nodeadm-partial-cri-table")
    # cni.bin_dir is set by the drop-in itself: changed, not lost
    assert out.details["nodeadm_partial_cri_table"] == {
        "file": DROPIN, "table": "io.containerd.grpc.v1.cri", "table_from": ROOT,
        "removes": ["sandbox_image", "enable_cdi", "registry.config_path"],
        "lost": [{"key": "sandbox_image", "written": "p:1", "effective": None},
                 {"key": "enable_cdi", "written": False, "effective": None},
                 {"key": "registry.config_path", "written": "/etc/containerd/certs.d",
                  "effective": None}],
        "source": "own merge with containerd 1.x semantics"}
    assert out.summary.endswith(
        "it removes sandbox_image, enable_cdi, registry.config_path that /etc/containerd/config.toml set")


def test_containerds_dump_shows_the_default_that_took_a_settings_place(tmp_path):
    files = {ROOT: ROOT_TEXT, DROPIN: DROPIN_TEXT}
    write_files(tmp_path, files)
    (tmp_path / NCR.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / NCR.lstrip("/")).write_text("")
    (tmp_path / NCR.lstrip("/")).chmod(0o755)
    # 1.7's dump after the replace: defaults for what the root set, enable_cdi's default
    # false equal to what the root wrote (so not lost)
    dump = (f'version = 2\nimports = ["{DROPIN}"]\n[{CRI}]\nsandbox_image = "registry.k8s.io/pause:3.8"\n'
            f'enable_cdi = false\n[{CRI}.registry]\nconfig_path = ""\n'
            f'[{CRI}.cni]\nbin_dir = "/opt/nodeadm/bin"\n' + NVIDIA)
    version = ("containerd", "--version")
    argv = ("containerd", "--config", ROOT, "config", "dump")
    h = Host(tmp_path, commands=Answers({version: CommandResult(version, 0, V17),
                                         argv: CommandResult(argv, 0, dump)}))
    out = run(h)
    assert out.details["nodeadm_partial_cri_table"] == {
        "file": DROPIN, "table": "io.containerd.grpc.v1.cri", "table_from": ROOT,
        "removes": ["sandbox_image", "registry.config_path"],
        "lost": [{"key": "sandbox_image", "written": "p:1", "effective": "registry.k8s.io/pause:3.8"},
                 {"key": "registry.config_path", "written": "/etc/containerd/certs.d",
                  "effective": ""}],
        "source": "containerd config dump"}


def test_a_version_1_layout_is_judged_on_its_cri_table(tmp_path):
    root = ('imports = ["/etc/containerd/config.d/*.toml"]\n'
            '[plugins.cri]\nsandbox_image = "p:1"\n')
    dropin = ('[plugins.cri.containerd.runtimes.nvidia]\nruntime_type = "io.containerd.runc.v2"\n'
              f'[plugins.cri.containerd.runtimes.nvidia.options]\nBinaryName = "{NCR}"\n')
    out = run(tree(tmp_path, {ROOT: root, DROPIN: dropin}, V17, execs=(NCR,)))
    found = out.details["nodeadm_partial_cri_table"]
    assert (found["table"], found["removes"]) == ("cri", ["sandbox_image"])


def test_a_later_file_that_owns_the_table_is_not_nodeadms_doing(tmp_path):
    later = "/etc/containerd/config.d/99-later.toml"
    files = {ROOT: ROOT_TEXT, DROPIN: DROPIN_TEXT, later: "version = 2\n" + NVIDIA}
    out = run(tree(tmp_path, files, V17, execs=(NCR,)))
    assert out.status == "pass"
    assert "nodeadm_partial_cri_table" not in out.details
