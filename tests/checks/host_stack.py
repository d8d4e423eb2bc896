"""The host-stack checks run together on a fixture bundle, as `check --bundle --only` runs
them (shared by tests/checks/test_os_supported.py, test_driver_*.py, test_toolkit_version.py,
test_kubelet_version.py)."""
from tests.conftest import bundle, run_cli

FOUNDATION = "os-supported,driver-loaded,driver-branch,driver-library-match,toolkit-version,kubelet-version"


def results(name, path="dra", only=FOUNDATION):
    res = run_cli(["check", "--bundle", bundle(name), "--path", path, "--only", only, "--format", "json"])
    assert res.rc in (0, 1), res.err
    doc = res.json()
    return res.rc, {c["id"]: c for c in doc["checks"]}, doc



def assert_row(name, path, check_id, status, needle):
    """One row of a check's failure table: its status and summary on the bundle, and a failing
    or unknown critical check closes the gate with a fix."""
    rc, checks, doc = results(name, path)
    got = checks[check_id]
    assert got["status"] == status, got["summary"]
    assert needle in got["summary"]
    if status in ("fail", "unknown"):
        assert rc == 1 and check_id in doc["gate"]["blocking"]
        assert got["remediation"]


def assert_code(name, path, check_id, code):
    # The JSON's checks[].code names the declared failure (docs/json-output.md).
    _, checks, _ = results(name, path, only=check_id)
    assert checks[check_id]["code"] == code, checks[check_id]["summary"]
