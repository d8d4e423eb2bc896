"""containerd-nvidia-runtime on fixture hosts and small trees.

Expectations are facts of the fixtures (which file defines the handler, which glob the root
imports, the version containerd reports) and of containerd's documented merge rules.
"""
from pathlib import Path

import pytest

from agent.host.bundle import load_bundle
from checks.containerd.containerd_cdi import CONTAINERD_CDI
from checks.containerd.containerd_nvidia_runtime import CONTAINERD_NVIDIA_RUNTIME
from tests.checks.containerd_support import V2X, V17, cli_results, on_bundle, policy, tree, up
from tests.conftest import bundle, run_cli


@pytest.mark.parametrize("name", ["containerd-v2-config-only", "containerd-v3-config-only"])
def test_healthy_layouts_pass_both_checks(name):
    checks = cli_results(name, "device-plugin")
    assert checks["containerd-nvidia-runtime"]["status"] == "pass"
    assert checks["containerd-cdi"]["status"] == "pass"
    details = checks["containerd-nvidia-runtime"]["details"]
    assert details["handler"] == "nvidia"
    assert details["binary_path"] == "/usr/bin/nvidia-container-runtime"
    assert "/etc/containerd/conf.d/99-nvidia.toml" in details["loaded"]


def test_nodeadm_rewrite_names_the_unimported_file_and_the_glob():
    out = on_bundle("containerd-nodeadm-not-imported", CONTAINERD_NVIDIA_RUNTIME, "device-plugin")
    assert out.status == "fail"
    assert "/etc/containerd/conf.d/99-nvidia.toml, which is not imported" in out.summary
    assert "['/etc/containerd/config.d/*.toml']" in out.summary
    assert out.details["nodeadm_host"] is True
    # The fix is nodeadm's own NodeConfig, as a complete CRI section landing in config.d/.
    assert "spec.containerd.config" in out.remediation
    assert "complete CRI section" in out.remediation
    assert "config.d/00-nodeadm.toml" in out.remediation
    assert "1.18.0 wrote config.d/" in out.remediation


def test_1x_later_dropin_wipes_the_handler_and_2x_keeps_it(tmp_path):
    out = on_bundle("containerd-1x-dropin-wipes", CONTAINERD_NVIDIA_RUNTIME, "device-plugin")
    assert out.status == "fail"
    assert "replaces the whole CRI plugin table" in out.summary
    assert out.details["cri_table_from"] == "/etc/containerd/conf.d/zz-runc-systemd.toml"
    # The same files under containerd 2.x (deep merge) keep the handler.
    root = Path(bundle("containerd-1x-dropin-wipes")) / "root"
    files = {f"/{p.relative_to(root)}": p.read_text() for p in root.rglob("*.toml")}
    host = tree(tmp_path, files, V2X, execs=("/usr/bin/nvidia-container-runtime",))
    assert CONTAINERD_NVIDIA_RUNTIME.run(host, policy("device-plugin")).status == "pass"


def test_malformed_toml_fails_with_file_and_line_and_other_checks_still_run():
    res = run_cli(["check", "--bundle", bundle("containerd-malformed-toml"), "--path", "dra", "--format", "json"])
    checks = {c["id"]: c for c in res.json()["checks"]}
    summary = checks["containerd-nvidia-runtime"]["summary"]
    assert checks["containerd-nvidia-runtime"]["status"] == "fail"
    assert "/etc/containerd/conf.d/99-nvidia.toml" in summary and "line 5" in summary
    assert checks["containerd-cdi"]["status"] == "fail"
    # every other check still ran, each with its own verdict (no kubelet on this fixture host)
    assert checks["allocation-owner"]["status"] == "skip" and "kubelet" in checks["allocation-owner"]["summary"]


def test_gating_follows_the_design_matrix():
    assert set(CONTAINERD_NVIDIA_RUNTIME.gates) == {"device-plugin", "operator-clusterpolicy"}
    assert set(CONTAINERD_CDI.gates) == {"dra", "operator-gpucluster"}


def test_configured_handler_name_and_config_path_are_used(tmp_path):
    cfg = up("nvidia-ctk-installer.v2-cdi.after.99-nvidia.toml")
    host = tree(tmp_path, {"/opt/ctd/main.toml": cfg}, V17, execs=("/usr/bin/nvidia-container-runtime.cdi",))
    out = CONTAINERD_NVIDIA_RUNTIME.run(
        host, policy("device-plugin", containerd={"handler": "nvidia-cdi", "config_path": "/opt/ctd/main.toml"})
    )
    assert out.status == "pass", out.summary
    assert out.details["binary_path"] == "/usr/bin/nvidia-container-runtime.cdi"


@pytest.mark.parametrize(
    "runtime, needle",
    [
        ('runtime_type = "io.containerd.runtime.v1.linux"\n', "not 'io.containerd.runc.v2'"),
        ('runtime_type = "io.containerd.runc.v2"\n', "no options.BinaryName"),
        ('runtime_type = "io.containerd.runc.v2"\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\nBinaryName = "/usr/bin/gone"\n', "/usr/bin/gone, which is not an executable"),
    ],
)
def test_handler_defects(tmp_path, runtime, needle):
    cfg = 'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n' + runtime
    out = CONTAINERD_NVIDIA_RUNTIME.run(tree(tmp_path, {"/etc/containerd/config.toml": cfg}, V17), policy())
    assert out.status == "fail" and needle in out.summary


def test_bare_binary_name_is_looked_up_on_the_shim_path(tmp_path):
    cfg = ('version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
           'runtime_type = "io.containerd.runc.v2"\n'
           '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
           'BinaryName = "nvidia-container-runtime"\n')
    host = tree(tmp_path, {"/etc/containerd/config.toml": cfg}, V17, execs=("/usr/local/bin/nvidia-container-runtime",))
    out = CONTAINERD_NVIDIA_RUNTIME.run(host, policy())
    assert out.status == "pass" and out.details["binary_path"] == "/usr/local/bin/nvidia-container-runtime"


def test_unknown_version_where_1x_and_2x_disagree_is_unknown(tmp_path):
    root = Path(bundle("containerd-1x-dropin-wipes")) / "root"
    files = {f"/{p.relative_to(root)}": p.read_text() for p in root.rglob("*.toml")}
    host = tree(tmp_path, files, None, execs=("/usr/bin/nvidia-container-runtime",))
    out = CONTAINERD_NVIDIA_RUNTIME.run(host, policy())
    assert out.status == "unknown"
    assert out.details["verdicts"] == {"1": "fail", "2": "pass"}


def test_missing_explicit_import_stops_containerd(tmp_path):
    cfg = 'version = 2\nimports = ["/etc/containerd/extra.toml"]\n'
    out = CONTAINERD_NVIDIA_RUNTIME.run(tree(tmp_path, {"/etc/containerd/config.toml": cfg}, V17), policy())
    assert out.status == "fail" and "/etc/containerd/extra.toml: imported but absent" in out.summary


def test_2x_drop_in_with_higher_version_than_root_makes_the_config_version_3(tmp_path):
    # containerd 2.1's `config dump` accepts a version-3 drop-in under a version-2 root and
    # reads the whole config as version 3 (tests/integration/test_containerd_21.py): the
    # drop-in's v3 runtime table holds the handler.
    files = {"/etc/containerd/config.toml": 'version = 2\nimports = ["conf.d/*.toml"]\n',
             "/etc/containerd/conf.d/99-nvidia.toml": up("nvidia-ctk-installer.v3.after.99-nvidia.toml")}
    out = CONTAINERD_NVIDIA_RUNTIME.run(
        tree(tmp_path, files, V2X, execs=("/usr/bin/nvidia-container-runtime",)), policy())
    assert out.status == "pass", out.summary


def test_collect_captures_imports_and_runtime_binaries(tmp_path):
    from agent.host.collect import collect

    loaded = load_bundle(bundle("containerd-v2-config-only"))
    try:
        out = collect(loaded.host, [CONTAINERD_NVIDIA_RUNTIME], str(tmp_path / "b"))
    finally:
        loaded.close()
    root = out / "root"
    assert (root / "etc/containerd/conf.d/99-nvidia.toml").read_text() == up("nvidia-ctk-installer.v2-cdi.after.99-nvidia.toml")
    assert (root / "usr/bin/nvidia-container-runtime.cdi").exists()
    again = load_bundle(out)
    try:
        assert CONTAINERD_NVIDIA_RUNTIME.run(again.host, policy("device-plugin")).status == "pass"
    finally:
        again.close()


def test_a_collected_config_with_a_registry_password_still_parses(tmp_path):
    """collect redacts `password = "..."` to a bare REDACTED (no longer TOML); the checks read
    the collected config as containerd would have read the original."""
    from agent.host.collect import collect

    auth = ('\n[plugins."io.containerd.grpc.v1.cri".registry.configs."r.example".auth]\n'
            '  username = "u"\n  password = "hunter2"\n')
    files = {"/etc/containerd/config.toml": up("nvidia-ctk-installer.v2-cdi.after.config.toml"),
             "/etc/containerd/conf.d/99-nvidia.toml": up("nvidia-ctk-installer.v2-cdi.after.99-nvidia.toml") + auth}
    host = tree(tmp_path / "host", files, V17, execs=("/usr/bin/nvidia-container-runtime",))
    out = collect(host, [CONTAINERD_NVIDIA_RUNTIME], str(tmp_path / "b"))
    collected = (out / "root/etc/containerd/conf.d/99-nvidia.toml").read_text()
    assert "hunter2" not in collected and "REDACTED" in collected
    again = load_bundle(out)
    try:
        result = CONTAINERD_NVIDIA_RUNTIME.run(again.host, policy("device-plugin"))
    finally:
        again.close()
    assert result.status == "pass", result.summary


def test_2x_merge_test_dropins_keep_both_runtimes():
    out = on_bundle("containerd-2x-merge-dropins", CONTAINERD_NVIDIA_RUNTIME, "device-plugin")
    assert out.status == "pass", out.summary
    assert out.details["source"] == "own merge with containerd 2.x semantics"
    assert out.details["loaded"] == ["/etc/containerd/config.toml", "/etc/containerd/conf.d/10-runc.toml",
                                     "/etc/containerd/conf.d/20-nvidia.toml"]


@pytest.mark.parametrize("name, status, code, needle", [
    ("containerd-malformed-toml", "fail", "config-unloadable", "invalid TOML"),
    ("containerd-nvidia-runtime-version-unknown", "unknown", "verdict-depends-on-version",
     "as 1.x: fail"),
    ("containerd-1x-dropin-wipes", "fail", "handler-replaced-by-later-dropin",
     "replaces the whole CRI plugin table"),
    ("containerd-nodeadm-not-imported", "fail", "handler-file-not-imported", "not imported"),
    ("host-foundation-only", "fail", "config-absent", "/etc/containerd/config.toml absent"),
    ("containerd-nvidia-runtime-no-handler", "fail", "handler-missing",
     "no runtime handler 'nvidia'"),
    ("containerd-nvidia-runtime-runtime-type-v1", "fail", "runtime-type-not-runc-v2",
     "'io.containerd.runtime.v1.linux'"),
    ("containerd-nvidia-runtime-no-binary-name", "fail", "binary-name-missing",
     "no options.BinaryName"),
    ("containerd-nvidia-runtime-binary-missing", "fail", "binary-not-executable",
     "/usr/bin/nvidia-container-runtime, which is not an executable"),
])
def test_each_way_it_fails_names_its_declared_code(name, status, code, needle):
    out = on_bundle(name, CONTAINERD_NVIDIA_RUNTIME, "device-plugin")
    assert (out.status, out.code) == (status, code), out.summary
    assert needle in out.summary
    assert CONTAINERD_NVIDIA_RUNTIME.failure(code).status == status


def test_a_failure_without_its_own_fix_reports_the_declared_one():
    # binary-not-executable has no per-host value in its fix: the engine takes the declared one.
    checks = cli_results("containerd-nvidia-runtime-binary-missing", "device-plugin")
    runtime = checks["containerd-nvidia-runtime"]
    assert runtime["code"] == "binary-not-executable"
    assert runtime["remediation"].startswith("Install the NVIDIA Container Toolkit")
    # A fix that names the host's own files stays the outcome's (the 1.x winner's path).
    wiped = on_bundle("containerd-1x-dropin-wipes", CONTAINERD_NVIDIA_RUNTIME, "device-plugin")
    assert "/etc/containerd/conf.d/zz-runc-systemd.toml" in wiped.remediation


def test_a_handler_that_is_not_a_table_is_a_config_containerd_rejects(tmp_path):
    # Real containerd 1.7 on this file: `config dump` exits 1, "Can't convert
    # /usr/bin/nvidia-container-runtime(string) to config.Runtime".
    cfg = ('version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes]\n'
           'nvidia = "/usr/bin/nvidia-container-runtime"\n')
    out = CONTAINERD_NVIDIA_RUNTIME.run(tree(tmp_path, {"/etc/containerd/config.toml": cfg}, V17), policy())
    assert (out.status, out.code) == ("fail", "config-unloadable")
    assert "runtime handler 'nvidia' is not a table" in out.summary
