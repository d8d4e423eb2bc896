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

