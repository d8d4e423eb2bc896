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
        # R565 is a feature branch NVIDIA lists as ended: policy version 2 (the default) warns
        # on every path (version 1 passed it on dra: test_eol_branch_warns_per_policy_version).
        ("host-driver-565-open", "dra", "driver-branch", "warn", "565.57.01 (open module), R565 new feature branch: past NVIDIA's end of life"),
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


def _branch_570(tmp_path):
    import shutil

    src = tmp_path / "b"
    shutil.copytree(bundle("host-foundation-only"), src, symlinks=True)
    version = src / "root/proc/driver/nvidia/version"
    version.write_text(version.read_text().replace("580.173.02", "570.195.03"))
    lib = src / "root/usr/lib/x86_64-linux-gnu"
    (lib / "libnvidia-ml.so.1").unlink()
    (lib / "libnvidia-ml.so.1").symlink_to("libnvidia-ml.so.570.195.03")
    return src


@pytest.mark.parametrize("pin, warned_on", [
    # policy version 1: the device-plugin row alone ("535, warn past NVIDIA's end of life")
    ("policy_version: 1\n", {"device-plugin"}),
    # policy version 2 (the default): an ended branch gets no security fixes on any path
    ("", {"device-plugin", "dra", "operator-clusterpolicy", "operator-gpucluster"}),
])
def test_eol_branch_warns_per_policy_version(tmp_path, pin, warned_on):
    # 570 is a production branch whose end of life (2026-02-28) is in policy_v1.yaml; it meets
    # every path's minimum but operator-gpucluster's (580), where it fails whatever the version.
    src = _branch_570(tmp_path)
    cfg = tmp_path / "config.yaml"
    cfg.write_text(pin or "{}\n")
    for path in ("device-plugin", "dra", "operator-clusterpolicy"):
        res = run_cli(["check", "--config", str(cfg), "--bundle", str(src), "--path", path,
                       "--only", "driver-branch", "--format", "json"])
        (got,) = res.json()["checks"]
        if path in warned_on:
            assert (got["status"], got["code"]) == ("warn", "branch-past-end-of-life"), path
            assert "past NVIDIA's end of life (2026-02-28)" in got["summary"]
        else:
            assert got["status"] == "pass", (path, got["summary"])


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
