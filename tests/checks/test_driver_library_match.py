"""driver-library-match on fixture hosts: the loaded module against userspace libnvidia-ml."""
import pytest

from tests.checks.host_stack import results


@pytest.mark.parametrize(
    "name, path, check_id, status, needle",
    [
        ("host-driver-library-mismatch", "dra", "driver-library-match", "fail", "kernel module 580.173.02, userspace libnvidia-ml 580.178"),
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


@pytest.mark.parametrize("name, path, code", [
    ("host-jetson", "dra", "version-unreadable"),
    ("host-driver-library-mismatch", "dra", "library-mismatch"),
])
def test_failure_codes_on_fixture_hosts(name, path, code):
    # The JSON's checks[].code names the declared failure (docs/json-output.md).
    _, checks, _ = results(name, path, only="driver-library-match")
    assert checks["driver-library-match"]["code"] == code, checks["driver-library-match"]["summary"]
