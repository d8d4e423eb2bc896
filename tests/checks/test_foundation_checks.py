"""The foundation's checks on fixture hosts: pass, and each way each one fails.

Expected values are facts of the fixtures (the driver version in the real
/proc/driver/nvidia/version file, the branch minimums the policy cites), not copied output.
"""
import pytest

from tests.conftest import bundle, run_cli

FOUNDATION = "os-supported,driver-loaded,driver-branch,driver-library-match,toolkit-version,kubelet-version"


def results(name, path="dra", only=FOUNDATION):
    res = run_cli(["check", "--bundle", bundle(name), "--path", path, "--only", only, "--format", "json"])
    assert res.rc in (0, 1), res.err
    doc = res.json()
    return res.rc, {c["id"]: c for c in doc["checks"]}, doc


@pytest.mark.parametrize("path", ["device-plugin", "dra", "operator-clusterpolicy", "operator-gpucluster"])
def test_healthy_host_passes_every_foundation_check_on_every_path(path):
    rc, checks, doc = results("host-foundation-only", path)
    assert {cid: c["status"] for cid, c in checks.items()} == {cid: "pass" for cid in FOUNDATION.split(",")}
    assert rc == 0 and doc["gate"] == {"open": True, "blocking": []}


@pytest.mark.parametrize(
    "name, path, check_id, status, needle",
    [
        ("host-no-driver", "dra", "driver-loaded", "fail", "not loaded"),
        ("host-missing-dev-nodes", "dra", "driver-loaded", "fail", "7 /dev/nvidiaN node(s) for 8 GPU(s)"),
        ("host-driver-560", "dra", "driver-branch", "fail", "below the dra minimum R565"),
        ("host-driver-565-open", "dra", "driver-branch", "pass", "565.57.01 (open module)"),
        ("host-driver-565-open", "operator-gpucluster", "driver-branch", "fail", "below the operator-gpucluster minimum R580"),
        ("host-driver-library-mismatch", "dra", "driver-library-match", "fail", "kernel module 580.173.02, userspace libnvidia-ml 580.178"),
        ("host-jetson", "dra", "driver-branch", "unknown", "Jetson/L4T"),
        ("host-toolkit-117", "dra", "toolkit-version", "fail", "1.17.8 is below 1.18.0"),
        ("host-toolkit-117", "device-plugin", "toolkit-version", "pass", "1.17.8"),
        ("host-no-driver", "dra", "toolkit-version", "fail", "not installed"),
        ("host-kubelet-133", "dra", "kubelet-version", "fail", "1.33.5 is below 1.34.2"),
        ("host-kubelet-133", "device-plugin", "kubelet-version", "pass", "not gated"),
        ("host-os-debian12", "dra", "os-supported", "warn", "not in the support matrix"),
        ("host-os-ubuntu2004", "dra", "os-supported", "warn", "deprecated"),
    ],
)
def test_each_failure_has_a_fixture_host(name, path, check_id, status, needle):
    rc, checks, doc = results(name, path)
    got = checks[check_id]
    assert got["status"] == status, got["summary"]
    assert needle in got["summary"]
    if status in ("fail", "unknown"):
        assert rc == 1 and check_id in doc["gate"]["blocking"]
        assert got["remediation"]


def test_missing_driver_skips_dependants_naming_the_owner():
    _, checks, _ = results("host-no-driver")
    assert checks["driver-loaded"]["status"] == "fail"
    for dependant in ("driver-branch", "driver-library-match"):
        assert checks[dependant]["status"] == "skip"
        assert checks[dependant]["skip"] == "needs:driver-loaded"
        assert "needs driver-loaded" in checks[dependant]["summary"]


def test_unsupported_os_warns_but_does_not_close_the_gate_unless_strict():
    rc, _, doc = results("host-os-debian12")
    assert rc == 0 and doc["gate"]["open"]
    strict = run_cli(["check", "--bundle", bundle("host-os-debian12"), "--only", FOUNDATION, "--strict", "--format", "json"])
    assert strict.rc == 1 and strict.json()["gate"]["blocking"] == ["os-supported"]


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
