"""containerd-cdi on fixture hosts and small trees: CDI enabled (explicitly or by the installed
version's default, containerd docs/cri/config.md) with spec directories covering NVIDIA's."""
import pytest

from checks.containerd.containerd_cdi import CONTAINERD_CDI
from tests.checks.containerd_support import V17, cli_results, on_bundle, policy, tree


def test_v3_host_is_merged_with_2x_semantics_and_cdi_is_on_by_default():
    out = on_bundle("containerd-v3-config-only", CONTAINERD_CDI)
    assert out.details["containerd_version"] == "2.1.4"
    assert out.details["enable_cdi"] is True and out.details["enable_cdi_explicit"] is False


def test_cdi_disabled_on_17_fails_and_names_the_default():
    checks = cli_results("containerd-cdi-disabled-17")
    assert checks["containerd-nvidia-runtime"]["status"] == "pass"
    cdi = checks["containerd-cdi"]
    assert cdi["status"] == "fail"
    assert "1.7 defaults it to false" in cdi["summary"]


def test_cdi_on_16_is_not_supported():
    out = on_bundle("containerd-1x-dropin-wipes", CONTAINERD_CDI)
    assert out.status == "fail" and "1.6.20 has no CDI support" in out.summary


def test_cdi_spec_dirs_must_cover_where_nvidia_specs_are(tmp_path):
    cfg = ('version = 2\n[plugins."io.containerd.grpc.v1.cri"]\nenable_cdi = true\n'
           'cdi_spec_dirs = ["/etc/cdi"]\n')
    host = tree(tmp_path, {"/etc/containerd/config.toml": cfg, "/var/run/cdi/nvidia.yaml": "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\n"}, V17)
    out = CONTAINERD_CDI.run(host, policy())
    assert out.status == "fail" and "do not include /var/run/cdi" in out.summary


def test_var_run_and_run_are_the_same_directory(tmp_path):
    cfg = ('version = 2\n[plugins."io.containerd.grpc.v1.cri"]\nenable_cdi = true\n'
           'cdi_spec_dirs = ["/etc/cdi", "/run/cdi"]\n')
    out = CONTAINERD_CDI.run(tree(tmp_path, {"/etc/containerd/config.toml": cfg}, V17), policy())
    assert out.status == "pass", out.summary


@pytest.mark.parametrize("name, status, code, needle", [
    ("containerd-malformed-toml", "fail", "config-unloadable", "invalid TOML"),
    ("containerd-nvidia-runtime-version-unknown", "unknown", "verdict-depends-on-version",
     "as 2.x: pass"),
    ("containerd-1x-dropin-wipes", "fail", "cdi-unsupported-version", "1.6.20 has no CDI support"),
    ("containerd-cdi-disabled-17", "fail", "cdi-disabled", "enable_cdi not set"),
    ("containerd-cdi-spec-dirs-etc-only", "fail", "cdi-spec-dirs-incomplete",
     "do not include /var/run/cdi"),
])
def test_each_way_it_fails_names_its_declared_code(name, status, code, needle):
    out = on_bundle(name, CONTAINERD_CDI)
    assert (out.status, out.code) == (status, code), out.summary
    assert needle in out.summary
    assert CONTAINERD_CDI.failure(code).status == status


def test_unset_enable_cdi_with_unknown_version_is_decided_per_semantics(tmp_path):
    # No version: 1.x's default (false) and 2.x's (true) disagree, so the check is unknown
    # naming both verdicts (docs/checks-container.md), never a guess.
    cfg = 'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\ncdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]\n'
    out = CONTAINERD_CDI.run(tree(tmp_path, {"/etc/containerd/config.toml": cfg}), policy())
    assert out.status == "unknown" and out.code == "verdict-depends-on-version"
    assert out.details["verdicts"] == {"1": "fail", "2": "pass"}
