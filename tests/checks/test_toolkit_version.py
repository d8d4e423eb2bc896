"""toolkit-version on fixture hosts: installed, and at the path's minimum (policy_v1.yaml)."""
import pytest

from tests.checks.host_stack import assert_code, assert_row


@pytest.mark.parametrize(
    "name, path, check_id, status, needle",
    [
        ("host-toolkit-117", "dra", "toolkit-version", "fail", "1.17.8 is below 1.18.0"),
        ("host-toolkit-117", "device-plugin", "toolkit-version", "pass", "1.17.8"),
        ("host-no-driver", "dra", "toolkit-version", "fail", "not installed"),
    ],
)
def test_each_failure_has_a_fixture_host(name, path, check_id, status, needle):
    assert_row(name, path, check_id, status, needle)


@pytest.mark.parametrize("name, path, code", [
    ("host-no-driver", "dra", "toolkit-missing"),
    ("host-toolkit-117", "dra", "toolkit-too-old"),
    ("host-toolkit-117", "device-plugin", None),
])
def test_failure_codes_on_fixture_hosts(name, path, code):
    assert_code(name, path, "toolkit-version", code)
