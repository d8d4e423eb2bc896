"""toolkit-version on fixture hosts: installed, and at the path's minimum (policy_v1.yaml)."""
import pytest

from tests.checks.host_stack import results


@pytest.mark.parametrize(
    "name, path, check_id, status, needle",
    [
        ("host-toolkit-117", "dra", "toolkit-version", "fail", "1.17.8 is below 1.18.0"),
        ("host-toolkit-117", "device-plugin", "toolkit-version", "pass", "1.17.8"),
        ("host-no-driver", "dra", "toolkit-version", "fail", "not installed"),
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
    ("host-no-driver", "dra", "toolkit-missing"),
    ("host-toolkit-117", "dra", "toolkit-too-old"),
    ("host-toolkit-117", "device-plugin", None),
])
def test_failure_codes_on_fixture_hosts(name, path, code):
    # The JSON's checks[].code names the declared failure (docs/json-output.md).
    _, checks, _ = results(name, path, only="toolkit-version")
    assert checks["toolkit-version"]["code"] == code, checks["toolkit-version"]["summary"]
