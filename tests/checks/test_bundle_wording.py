"""Support-bundle wording: when a bundle (or a bare tree) simply did not capture a fact, the
fix printed says it was not captured and how to capture it, never a live-host repair such as
"Run as root (CAP_SYSLOG)". A real finding keeps its own fix."""
import pytest

from tests.conftest import BUNDLES, run_cli

FIXTURES = sorted(p.name for p in BUNDLES.iterdir() if (p / "bundle.yaml").is_file())


def _checks(args):
    return {c["id"]: c for c in run_cli(args + ["--format", "json"]).json()["checks"]}


def test_a_bundle_without_a_kernel_log_says_how_to_capture_one():
    xid = _checks(["check", "--bundle", str(BUNDLES / "host-foundation-only")])["gpu-xid"]
    assert xid["status"] == "unknown"
    fix = xid["remediation"]
    assert fix.startswith("Not captured in this bundle: the kernel log")
    assert "sudo gpu-node-agent collect" in fix
    assert "CAP_SYSLOG" not in fix


def test_commands_a_bundle_did_not_record_are_named_in_the_fix():
    ts = _checks(["check", "--bundle", str(BUNDLES / "time-nothing-recorded")])["time-sync"]
    assert ts["status"] == "unknown"
    assert "`chronyc -c tracking`" in ts["remediation"]
    assert "gpu-node-agent collect" in ts["remediation"]


def test_a_real_finding_keeps_its_own_fix():
    loaded = _checks(["check", "--bundle", str(BUNDLES / "host-no-driver")])["driver-loaded"]
    assert loaded["status"] == "fail"
    assert loaded["remediation"].startswith("Install the NVIDIA data center driver")


def test_a_bare_tree_says_it_reads_files_only(tmp_path):
    (tmp_path / "proc/driver/nvidia").mkdir(parents=True)
    (tmp_path / "proc/driver/nvidia/version").write_bytes(
        (BUNDLES / "host-foundation-only/root/proc/driver/nvidia/version").read_bytes())
    loaded = _checks(["check", "--host-root", str(tmp_path), "--only", "driver-loaded"])
    assert loaded["driver-loaded"]["status"] == "unknown"
    fix = loaded["driver-loaded"]["remediation"]
    assert fix.startswith("Not available under --host-root: the dev_nodes fact")
    assert "gpu-node-agent collect" in fix


def test_the_live_host_keeps_the_live_fix():
    # On this machine nothing is "not captured": the fixes are the checks' own.
    live = _checks(["check", "--only", "driver-loaded"])
    assert "Not captured" not in live["driver-loaded"]["remediation"]


@pytest.mark.parametrize("name", FIXTURES)
def test_every_not_captured_unknown_says_how_to_capture(name):
    for cid, c in _checks(["check", "--bundle", str(BUNDLES / name)]).items():
        words = c["summary"]
        if c["status"] == "unknown" and ("not recorded" in words or "not captured" in words):
            assert "gpu-node-agent collect" in c["remediation"], (name, cid, c["remediation"])
            assert "CAP_SYSLOG" not in c["remediation"], (name, cid)
