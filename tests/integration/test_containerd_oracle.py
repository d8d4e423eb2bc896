"""The real containerd as the oracle for our own merge: for every version-2 containerd fixture,
the check's merge (run with no binary) is compared with `containerd config dump` of the same
files by Debian's 1.6, trixie's 1.7 and forky's 2.1 (which also reads the version-3 fixtures),
and the verdicts on the handler and CDI agree.

containerd 2.x (docs/man/containerd-config.toml.5.md, "imports"; RELEASES.md, config version
3) merges imported plugin tables key by key and migrates a version-2 config to version 3 on
load: the runtimes, CDI and CNI settings move to plugins."io.containerd.cri.v1.runtime",
sandbox_image to plugins."io.containerd.cri.v1.images".pinned_images.sandbox; `enable_cdi`
defaults to true and `cdi_spec_dirs` to ["/etc/cdi", "/var/run/cdi"] (docs/cri/config.md).
Its `config dump` prints the root's `imports` as written, where 1.x prints the files loaded."""
import sys
from pathlib import Path

import pytest

from agent.config import Config
from agent.host.bundle import RecordedCommands
from agent.host.seam import Host
from checks.containerd.config import CRI_V2, CRI_V3_RUNTIME, load_effective, table
from checks.containerd.containerd_cdi import CONTAINERD_CDI
from checks.containerd.containerd_nvidia_runtime import CONTAINERD_NVIDIA_RUNTIME
from checks.containerd.migrate import CRI_V3_IMAGES
from checks.policy import ResolvedPolicy, load_policy
from tests.conftest import BUNDLES
from tests.integration.containerd.support import (
    BinaryAs,
    binary_version,
    containerd_16,
    containerd_17,
    containerd_21,
    rewrite_tree,
)

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

pytestmark = pytest.mark.integration


def v2_fixtures():
    out = []
    for bundle in sorted(BUNDLES.glob("containerd-*")):
        cfg = bundle / "root/etc/containerd/config.toml"
        text = cfg.read_text() if cfg.exists() else ""
        if "version = 2" in text:
            out.append(bundle.name)
    assert len(out) >= 4, out  # the fixture set this test is about must not silently shrink
    return out


def v3_fixtures():
    out = [b.name for b in sorted(BUNDLES.glob("containerd-*"))
           if "version = 3" in _root_text(b)]
    assert len(out) >= 1, out
    return out


def _root_text(bundle):
    cfg = bundle / "root/etc/containerd/config.toml"
    return cfg.read_text() if cfg.exists() else ""


BINARIES = {"1.6": containerd_16, "1.7": containerd_17, "2.1": containerd_21}
CASES = [(s, n) for s in ("1.6", "1.7", "2.1") for n in v2_fixtures()] + [
    ("2.1", n) for n in v3_fixtures()]


def policy(config_path, path="device-plugin"):
    settings = Config(containerd={"config_path": config_path}).model_dump()
    return ResolvedPolicy(load_policy(1), path, settings=settings)


@pytest.mark.parametrize("series,name", CASES)
def test_own_merge_matches_config_dump_and_verdicts_agree(tmp_path, name, series):
    binary = BINARIES[series]()
    tree = rewrite_tree(BUNDLES / name / "root", tmp_path / "root")
    config = str(tree / "etc/containerd/config.toml")
    version_out = binary_version(binary)
    dump_host = Host("/", commands=BinaryAs(binary))
    own_host = Host("/", commands=RecordedCommands(
        [{"argv": ["containerd", "--version"], "rc": 0, "stdout": version_out}], "oracle"))

    # 1. The merged CRI table: what containerd dumps vs what we merged (no binary).
    import subprocess

    dump = subprocess.run([binary, "--config", config, "config", "dump"], capture_output=True,
                          text=True, timeout=30)
    major = 2 if series.startswith("2.") else 1
    own = load_effective(own_host, config, major)
    if own.errors:
        assert dump.returncode != 0, "we reject a config containerd accepts"
        assert "99-nvidia.toml" in dump.stderr and "99-nvidia.toml" in own.errors[0]
    else:
        assert dump.returncode == 0, dump.stderr
        real = tomllib.loads(dump.stdout)
        real_cri = table(real, "plugins", CRI_V3_RUNTIME if major == 2 else CRI_V2)
        assert set(table(real_cri, "containerd", "runtimes")) == set(own.runtimes())
        for rt_name, ours in own.runtimes().items():
            theirs = table(real_cri, "containerd", "runtimes", rt_name)
            assert theirs.get("runtime_type") == ours.get("runtime_type")
            assert table(theirs, "options") == {**table(theirs, "options"), **table(ours, "options")}
        if major == 2:
            assert real["version"] == own.version == 3
            # 2.x: CDI on by default, both spec directories by default (docs/cri/config.md)
            assert real_cri["enable_cdi"] == own.cri().get("enable_cdi", True)
            assert real_cri["cdi_spec_dirs"] == own.cri().get("cdi_spec_dirs",
                                                              ["/etc/cdi", "/var/run/cdi"])
            assert real_cri["containerd"]["default_runtime_name"] == \
                table(own.cri(), "containerd").get("default_runtime_name", "runc")
            ours_sandbox = table(own.merged, "plugins", CRI_V3_IMAGES, "pinned_images").get("sandbox")
            if ours_sandbox is not None:
                assert table(real, "plugins", CRI_V3_IMAGES, "pinned_images")["sandbox"] == ours_sandbox
            # 2.x dumps the root's import patterns as written
            root_imports = own.files[config].get("imports", [])
            assert real.get("imports", []) == root_imports
        elif series == "1.7":
            assert real_cri.get("enable_cdi") == own.cri().get("enable_cdi", False)
        else:
            assert "enable_cdi" not in real_cri  # 1.6 has no CDI support at all
        if major == 1:
            # containerd 1.x lists every file it loaded (the root included) under `imports`.
            assert sorted(real.get("imports", [])) == sorted(own.loaded)

    # 2. The verdicts: containerd's own dump as the authority vs our merge.
    for check, path in ((CONTAINERD_NVIDIA_RUNTIME, "device-plugin"), (CONTAINERD_CDI, "dra")):
        with_dump = check.run(dump_host, policy(config, path))
        without = check.run(own_host, policy(config, path))
        assert with_dump.details.get("source") == "containerd config dump"
        assert without.details.get("source", "").startswith("own merge")
        assert with_dump.status == without.status, (check.id, with_dump.summary, without.summary)


def test_expected_verdicts_under_the_real_16(tmp_path):
    """The verdicts the fixtures are named for hold with containerd's own dump deciding."""
    binary = containerd_16()
    expect = {"containerd-v2-config-only": "pass", "containerd-1x-dropin-wipes": "fail",
              "containerd-nodeadm-not-imported": "fail", "containerd-malformed-toml": "fail"}
    for name, status in expect.items():
        tree = rewrite_tree(BUNDLES / name / "root", tmp_path / name)
        out = CONTAINERD_NVIDIA_RUNTIME.run(Host("/", commands=BinaryAs(binary)),
                                            policy(str(tree / "etc/containerd/config.toml")))
        assert out.status == status, (name, out.summary)
        if name == "containerd-nodeadm-not-imported":
            assert "conf.d/99-nvidia.toml, which is not imported" in out.summary


def test_cdi_disabled_under_the_real_17(tmp_path):
    binary = containerd_17()
    tree = rewrite_tree(BUNDLES / "containerd-cdi-disabled-17" / "root", tmp_path / "root")
    out = CONTAINERD_CDI.run(Host("/", commands=BinaryAs(binary)),
                             policy(str(tree / "etc/containerd/config.toml"), "dra"))
    assert out.status == "fail" and out.details["enable_cdi"] is False
    assert out.details["source"] == "containerd config dump"
    assert Path(binary).exists()
