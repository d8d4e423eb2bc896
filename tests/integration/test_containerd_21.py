"""containerd 2.1 (Debian forky's, unpacked by .ci/setup.d/30-containerd.sh, not installed)
beside 1.6 and 1.7: the binary is the 2.1 series and its `config dump` reads a minimal
version-3 config and migrates a version-2 one, so later 2.x oracle tests stand on a real
daemon's reading.

Expectations from containerd's documentation (docs/cri/config.md and RELEASES.md of
containerd 2.x): config version 3 is the 2.x format; the CRI runtime settings live under
`plugins."io.containerd.cri.v1.runtime"` (in version 2 under `plugins."io.containerd.grpc.v1.cri"`);
`enable_cdi` defaults to true from 2.0; the default runtime is `runc`.
"""
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.containerd.support import binary_version, containerd_21

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

pytestmark = pytest.mark.integration
RUNTIME = "io.containerd.cri.v1.runtime"


def dump(binary: str, config: Path) -> dict:
    proc = subprocess.run([binary, "--config", str(config), "config", "dump"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return tomllib.loads(proc.stdout)


def test_it_is_containerd_21():
    words = (binary_version(containerd_21()) or "").split()
    # "containerd github.com/containerd/containerd/v2 2.1.9+unknown": 2.x's Go module path ends in /v2
    assert words[:2] == ["containerd", "github.com/containerd/containerd/v2"], words
    assert words[2].startswith("2.1."), words


def test_config_dump_reads_a_minimal_version_3_config(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text(f'version = 3\nroot = "{tmp_path}/root"\nstate = "{tmp_path}/state"\n')
    real = dump(containerd_21(), config)
    assert real["version"] == 3
    assert real["root"] == f"{tmp_path}/root" and real["state"] == f"{tmp_path}/state"
    runtime = real["plugins"][RUNTIME]
    assert runtime["enable_cdi"] is True  # the 2.x default
    assert runtime["containerd"]["default_runtime_name"] == "runc"
    # `config dump` only reads: it creates neither the root nor the state directory.
    assert not (tmp_path / "root").exists() and not (tmp_path / "state").exists()


def test_config_dump_migrates_version_2(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text(f'version = 2\nroot = "{tmp_path}/root"\nstate = "{tmp_path}/state"\n'
                      '[plugins."io.containerd.grpc.v1.cri"]\n  enable_cdi = false\n')
    real = dump(containerd_21(), config)
    assert real["version"] == 3
    assert real["plugins"][RUNTIME]["enable_cdi"] is False  # our value, moved to its v3 table
    assert "io.containerd.grpc.v1.cri" not in real["plugins"] or \
        "enable_cdi" not in real["plugins"]["io.containerd.grpc.v1.cri"]


def _own(config: Path):
    from agent.host.seam import Host
    from checks.containerd.config import load_effective

    return load_effective(Host("/"), str(config), 2)


def test_v3_root_with_a_v2_drop_in_directory_merges_as_ours(tmp_path):
    """A drop-in directory holding a version-3 file and, after it, a version-2 one (what
    nvidia-ctk writes for a version-2 root) under a version-3 root. What containerd 2.1 does,
    and our merge must do: the version-2 file's `version` overrides (the merged config is
    version 2 again), and the migration to version 3 then keeps what the version-3 runtime
    table already has (`containerd.runtimes` from 10-runc.toml) over the moved version-2 keys:
    the `nvidia` runtime is lost while `enable_cdi` and `cdi_spec_dirs` move."""
    conf_d = tmp_path / "conf.d"
    conf_d.mkdir()
    (conf_d / "10-runc.toml").write_text(
        'version = 3\n[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]\n'
        "  SystemdCgroup = true\n")
    (conf_d / "20-nvidia.toml").write_text(
        'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  enable_cdi = false\n'
        '  cdi_spec_dirs = ["/etc/cdi"]\n'
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
        '  runtime_type = "io.containerd.runc.v2"\n'
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
        '  BinaryName = "/usr/bin/nvidia-container-runtime"\n')
    config = tmp_path / "config.toml"
    config.write_text(f'version = 3\nimports = ["{conf_d}/*.toml"]\n')
    real = dump(containerd_21(), config)["plugins"][RUNTIME]
    own = _own(config)
    assert not own.errors and own.version == 3
    assert real["enable_cdi"] is False and own.cri()["enable_cdi"] is False
    assert real["cdi_spec_dirs"] == own.cri()["cdi_spec_dirs"] == ["/etc/cdi"]
    assert set(real["containerd"]["runtimes"]) == set(own.runtimes()) == {"runc"}
    assert real["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is True
    assert own.runtimes()["runc"]["options"]["SystemdCgroup"] is True


def test_v2_root_with_a_v3_drop_in_ignores_the_roots_cri_table(tmp_path):
    """A version-3 drop-in under a version-2 root: containerd 2.1 accepts it, the merged config
    is version 3, and the root's version-2 CRI table (its `nvidia` runtime and sandbox_image)
    is no longer read. Ours agrees."""
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d/99.toml").write_text(
        'version = 3\n[plugins."io.containerd.cri.v1.runtime"]\n  enable_cdi = false\n')
    config = tmp_path / "config.toml"
    config.write_text(f'version = 2\nimports = ["{tmp_path}/conf.d/*.toml"]\n'
                      '[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "x/pause:1"\n'
                      '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
                      '  runtime_type = "io.containerd.runc.v2"\n')
    full = dump(containerd_21(), config)
    own = _own(config)
    assert not own.errors and own.version == full["version"] == 3
    assert "nvidia" not in full["plugins"][RUNTIME]["containerd"]["runtimes"]
    assert "nvidia" not in own.runtimes()
    assert full["plugins"][RUNTIME]["enable_cdi"] is False and own.cri()["enable_cdi"] is False
    assert full["plugins"]["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"] != "x/pause:1"
    assert "pinned_images" not in own.merged["plugins"].get("io.containerd.cri.v1.images", {})


def test_a_version_1_drop_in_is_migrated_before_the_merge(tmp_path):
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d/50.toml").write_text('version = 1\n[plugins.cri]\n  enable_cdi = false\n')
    config = tmp_path / "config.toml"
    config.write_text(f'version = 2\nimports = ["{tmp_path}/conf.d/*.toml"]\n'
                      '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
                      '  runtime_type = "io.containerd.runc.v2"\n')
    real = dump(containerd_21(), config)["plugins"][RUNTIME]
    own = _own(config)
    assert real["enable_cdi"] is False and own.cri()["enable_cdi"] is False
    assert "nvidia" in real["containerd"]["runtimes"] and "nvidia" in own.runtimes()


@pytest.mark.parametrize("name, status", [("containerd-cgroup-driver-ok-21", "pass"),
                                          ("containerd-cgroup-driver-differs-from-default", "fail")])
def test_cgroup_driver_verdicts_hold_with_21s_dump(tmp_path, name, status):
    """The default runtime's and nvidia's SystemdCgroup as containerd 2.1 itself reports them
    (its dump prints every runtime's options) give the bundle's verdict."""
    from agent.config import Config
    from agent.host.seam import Host
    from checks.containerd.cgroup_driver import CONTAINERD_CGROUP_DRIVER
    from checks.policy import ResolvedPolicy, load_policy
    from tests.conftest import BUNDLES
    from tests.integration.containerd.support import BinaryAs, rewrite_tree

    tree = rewrite_tree(BUNDLES / name / "root", tmp_path / "root")
    settings = Config(containerd={"config_path": str(tree / "etc/containerd/config.toml")}).model_dump()
    out = CONTAINERD_CGROUP_DRIVER.run(Host("/", commands=BinaryAs(containerd_21())),
                                       ResolvedPolicy(load_policy(2), "device-plugin", settings=settings))
    assert out.details["source"] == "containerd config dump"
    assert out.status == status, out.summary
    assert out.details["default_runtime"] == "runc" and out.details["default_systemd_cgroup"] is True
