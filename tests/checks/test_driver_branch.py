"""driver-branch on fixture hosts: the branch against the path's minimum and NVIDIA's lifecycle.

Expected values are facts of the fixtures (the driver version in the real
/proc/driver/nvidia/version file, the branch minimums policy_v1.yaml cites), not copied output.
"""
import pytest

from tests.checks.host_stack import assert_code, assert_row, results
from tests.conftest import bundle, run_cli


@pytest.mark.parametrize(
    "name, path, check_id, status, needle",
    [
        ("host-driver-560", "dra", "driver-branch", "fail", "below the dra minimum R565"),
        ("host-driver-565-open", "dra", "driver-branch", "pass", "565.57.01 (open module)"),
        ("host-driver-565-open", "operator-gpucluster", "driver-branch", "fail", "below the operator-gpucluster minimum R580"),
        ("host-jetson", "dra", "driver-branch", "unknown", "Jetson/L4T"),
    ],
)
def test_each_failure_has_a_fixture_host(name, path, check_id, status, needle):
    assert_row(name, path, check_id, status, needle)


def test_driver_branch_details_name_the_branch_kind():
    _, checks, _ = results("host-foundation-only")
    details = checks["driver-branch"]["details"]
    assert (details["branch"], details["branch_kind"], details["flavor"]) == (580, "ltsb", "proprietary")


def test_eol_branch_warns_on_device_plugin_only(tmp_path):
    # 570 is a production branch whose end of life (2026-02) is in policy_v1.yaml.
    import shutil

    src = tmp_path / "b"
    shutil.copytree(bundle("host-foundation-only"), src, symlinks=True)
    version = src / "root/proc/driver/nvidia/version"
    version.write_text(version.read_text().replace("580.173.02", "570.195.03"))
    lib = src / "root/usr/lib/x86_64-linux-gnu"
    (lib / "libnvidia-ml.so.1").unlink()
    (lib / "libnvidia-ml.so.1").symlink_to("libnvidia-ml.so.570.195.03")
    dp = run_cli(["check", "--bundle", str(src), "--path", "device-plugin", "--only", "driver-branch", "--format", "json"])
    dra = run_cli(["check", "--bundle", str(src), "--path", "dra", "--only", "driver-branch", "--format", "json"])
    by_id = lambda r: {c["id"]: c for c in r.json()["checks"]}  # noqa: E731
    assert by_id(dp)["driver-branch"]["status"] == "warn"
    assert "end of life" in by_id(dp)["driver-branch"]["summary"]
    assert by_id(dra)["driver-branch"]["status"] == "pass"


@pytest.mark.parametrize("name, path, code", [
    ("host-jetson", "dra", "version-unreadable"),
    ("host-driver-560", "dra", "branch-below-minimum"),
    ("host-driver-560", "device-plugin", "branch-past-end-of-life"),
    ("host-foundation-only", "dra", None),
])
def test_failure_codes_on_fixture_hosts(name, path, code):
    assert_code(name, path, "driver-branch", code)


def test_branch_outside_the_allowed_list_fails_with_its_code(tmp_path):
    # host-foundation-only loads 580.173.02; a fleet that allows only R535 refuses it.
    cfg = tmp_path / "config.yaml"
    cfg.write_text("policy:\n  driver:\n    allowed_branches: [535]\n")
    res = run_cli(["check", "--config", str(cfg), "--bundle", bundle("host-foundation-only"),
                   "--only", "driver-branch", "--format", "json"])
    (got,) = res.json()["checks"]
    assert (got["status"], got["code"]) == ("fail", "branch-not-allowed")
    assert "Install one of the fleet's allowed branches (R535)" in got["remediation"]
