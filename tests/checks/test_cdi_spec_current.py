"""cdi-spec-current on fixture hosts (built from nvidia-ctk's own generate-test spec) and on
small trees."""
import pytest
import yaml

from agent.config import Config
from agent.host.bundle import load_bundle
from agent.host.seam import Host, StaticFacts
from checks.containerd.cdi_spec_current import CDI_SPEC_CURRENT
from checks.policy import ResolvedPolicy, load_policy
from tests.checks.bundle_support import run_on_bundle
from tests.conftest import bundle, run_cli


def policy(path="dra", **settings):
    return ResolvedPolicy(load_policy(1), path, settings=Config(**settings).model_dump())


def on_bundle(name, **settings):
    return run_on_bundle(CDI_SPEC_CURRENT, name, policy(**settings))


def spec_text(name):
    return (load_bundle(bundle(name)).path / "root" / "var/run/cdi/nvidia.yaml").read_text()


def test_healthy_spec_covers_all_eight_gpus():
    out = on_bundle("cdi-spec-only")
    assert out.status == "pass", out.summary
    assert out.details["covered_gpu_nodes"] == [f"/dev/nvidia{i}" for i in range(8)]
    assert out.details["driver_version"] == "999.88.77"


def test_spec_from_before_a_driver_upgrade_is_stale():
    out = on_bundle("cdi-stale-after-upgrade")
    assert out.status == "fail"
    assert "generated for another driver (loaded 999.90.12" in out.summary
    assert "libcuda.so.999.88.77" in out.summary
    problems = out.details["problems"]["/etc/cdi/nvidia.yaml"]
    assert "/lib/x86_64-linux-gnu/libcuda.so.999.88.77" in problems["missing"]


def test_spec_missing_one_of_eight_gpus_names_it():
    out = on_bundle("cdi-missing-gpu")
    assert out.status == "fail"
    assert "covers 7 of 8 GPUs (missing /dev/nvidia7)" in out.summary


def test_expected_gpus_from_the_config_wins():
    assert on_bundle("cdi-spec-only", expected_gpus=9).status == "fail"


def test_malformed_yaml_fails_with_file_and_line_and_others_still_run():
    res = run_cli(["check", "--bundle", bundle("cdi-malformed-yaml"), "--path", "dra", "--format", "json"])
    checks = {c["id"]: c for c in res.json()["checks"]}
    assert checks["cdi-spec-current"]["status"] == "fail"
    assert checks["cdi-spec-current"]["summary"].startswith("/etc/cdi/nvidia.yaml: line ")
    assert checks["allocation-owner"]["status"] == "skip" and "kubelet" in checks["allocation-owner"]["summary"]


def test_no_driver_is_skip_naming_driver_loaded(tmp_path):
    out = CDI_SPEC_CURRENT.run(Host(tmp_path), policy())
    assert out.status == "skip" and "driver-loaded" in out.summary


def test_no_spec_passes_unless_required(tmp_path):
    _write(tmp_path, "proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  999.88.77  Thu Feb 20 23:41:34 UTC 2026\n")
    host = Host(tmp_path)
    assert CDI_SPEC_CURRENT.run(host, policy()).status == "pass"
    out = CDI_SPEC_CURRENT.run(host, policy(cdi={"require_spec": True}))
    assert out.status == "fail" and "cdi.require_spec" in out.summary


def _write(tmp_path, rel, text):
    target = tmp_path / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


def test_dra_claim_specs_are_checked_for_paths_only(tmp_path):
    healthy = yaml.safe_load(spec_text("cdi-spec-only"))
    claim = {"cdiVersion": "0.5.0", "kind": "k8s.gpu.nvidia.com/claim",
             "devices": [{"name": "abc-gpu-0", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}}]}
    _write(tmp_path, "var/run/cdi/k8s.gpu.nvidia.com-claim_abc.yaml", yaml.safe_dump(claim))
    _write(tmp_path, "var/run/cdi/nvidia.yaml", yaml.safe_dump(healthy))
    for i in range(8):
        _write(tmp_path, f"dev/nvidia{i}", "")
    _write(tmp_path, "proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  999.88.77  x\n")
    host = Host(tmp_path, facts=StaticFacts({"dev_nodes": [{"path": f"/dev/nvidia{i}"} for i in range(8)]}))
    out = CDI_SPEC_CURRENT.run(host, policy())
    # The host-wide spec's libraries and hook are absent in this tree: that is its failure,
    # and the claim spec (whose only path exists) adds none, nor counts toward coverage.
    assert out.details["claim_specs"] == ["/var/run/cdi/k8s.gpu.nvidia.com-claim_abc.yaml"]
    assert "/var/run/cdi/k8s.gpu.nvidia.com-claim_abc.yaml" not in out.details["problems"] or not out.details["problems"]["/var/run/cdi/k8s.gpu.nvidia.com-claim_abc.yaml"]
    assert out.details["covered_gpu_nodes"] == [f"/dev/nvidia{i}" for i in range(8)]


def test_duplicates_in_one_directory_fail(tmp_path):
    text = spec_text("cdi-spec-only")
    _write(tmp_path, "etc/cdi/nvidia.yaml", text)
    _write(tmp_path, "etc/cdi/nvidia-old.yaml", text)
    _write(tmp_path, "proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  999.88.77  x\n")
    out = CDI_SPEC_CURRENT.run(Host(tmp_path), policy())
    assert out.status == "fail"
    assert any("device nvidia.com/gpu=0 defined in" in f for f in out.details["failures"])


def test_a_broken_spec_of_another_vendor_is_a_warning_with_its_line(tmp_path):
    _write(tmp_path, "proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  999.88.77  x\n")
    _write(tmp_path, "etc/cdi/vendor.yaml", "cdiVersion: 0.5.0\nkind: vendor.example/dev\n\x07\n")
    out = CDI_SPEC_CURRENT.run(Host(tmp_path), policy())
    assert out.status == "warn" and out.summary.startswith("/etc/cdi/vendor.yaml: line 3")


def test_a_claim_spec_naming_a_missing_device_fails(tmp_path):
    _write(tmp_path, "proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  999.88.77  x\n")
    claim = {"cdiVersion": "0.5.0", "kind": "k8s.gpu.nvidia.com/claim",
             "devices": [{"name": "c-gpu-9", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia9"}]}}]}
    _write(tmp_path, "var/run/cdi/k8s.gpu.nvidia.com-claim_c.yaml", yaml.safe_dump(claim))
    out = CDI_SPEC_CURRENT.run(Host(tmp_path), policy())
    assert out.status == "fail"
    assert out.summary == "/var/run/cdi/k8s.gpu.nvidia.com-claim_c.yaml references /dev/nvidia9, which does not exist"


@pytest.mark.parametrize("name, status, code, needle", [
    ("cdi-malformed-yaml", "fail", "spec-unparseable", "/etc/cdi/nvidia.yaml: line "),
    ("cdi-spec-current-bad-version", "fail", "spec-invalid-format", "unsupported cdiVersion '0.9.0'"),
    ("cdi-stale-after-upgrade", "fail", "spec-stale", "generated for another driver"),
    ("cdi-spec-current-hook-missing", "fail", "spec-path-missing",
     "references /usr/bin/nvidia-cdi-hook, which does not exist"),
    ("cdi-spec-current-duplicate-same-dir", "fail", "device-duplicate",
     "defined in /var/run/cdi/nvidia-old.yaml and /var/run/cdi/nvidia.yaml"),
    ("cdi-missing-gpu", "fail", "gpu-coverage-incomplete", "covers 7 of 8 GPUs"),
    ("cdi-spec-current-shadowed", "warn", "device-shadowed",
     "defined in /etc/cdi/nvidia.yaml and /var/run/cdi/nvidia.yaml"),
    ("cdi-spec-current-other-vendor-broken", "warn", "other-vendor-spec-unparseable",
     "/etc/cdi/vendor.yaml: line "),
])
def test_each_way_it_fails_names_its_declared_code(name, status, code, needle):
    out = on_bundle(name)
    assert (out.status, out.code) == (status, code), out.summary
    assert needle in out.summary
    assert CDI_SPEC_CURRENT.failure(code).status == status


def test_required_spec_absent_has_its_code(tmp_path):
    _write(tmp_path, "proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  999.88.77  x\n")
    out = CDI_SPEC_CURRENT.run(Host(tmp_path), policy(cdi={"require_spec": True}))
    assert (out.status, out.code) == ("fail", "spec-required-missing")
    assert out.remediation is None  # the declared fix applies: regenerate the spec
    assert CDI_SPEC_CURRENT.failure("spec-required-missing").fix.startswith("Regenerate the spec")


def test_the_required_spec_bundle_fails_with_its_test_config():
    where = bundle("cdi-spec-current-required-missing")
    plain = run_cli(["check", "--bundle", where, "--only", "cdi-spec-current", "--format", "json"])
    assert plain.json()["checks"][0]["status"] == "pass"  # the same host without the setting
    res = run_cli(["check", "--bundle", where, "--config", f"{where}/test-config.yaml",
                   "--only", "cdi-spec-current", "--format", "json"])
    got = res.json()["checks"][0]
    assert (got["status"], got["code"]) == ("fail", "spec-required-missing")
    assert "cdi.require_spec" in got["summary"]
