"""os-supported on fixture hosts: the support matrix (policy_v1.yaml) warns, never fails."""
import pytest

from tests.checks.host_stack import FOUNDATION, assert_code, assert_row, results
from tests.conftest import bundle, run_cli


@pytest.mark.parametrize(
    "name, path, check_id, status, needle",
    [
        ("host-os-debian12", "dra", "os-supported", "warn", "not in the support matrix"),
        ("host-os-ubuntu2004", "dra", "os-supported", "warn", "deprecated"),
    ],
)
def test_each_failure_has_a_fixture_host(name, path, check_id, status, needle):
    assert_row(name, path, check_id, status, needle)


def test_unsupported_os_warns_but_does_not_close_the_gate_unless_strict():
    rc, _, doc = results("host-os-debian12")
    assert rc == 0 and doc["gate"]["open"]
    strict = run_cli(["check", "--bundle", bundle("host-os-debian12"), "--only", FOUNDATION, "--strict", "--format", "json"])
    assert strict.rc == 1 and strict.json()["gate"]["blocking"] == ["os-supported"]


@pytest.mark.parametrize("name, path, code", [
    ("host-os-debian12", "dra", "os-unsupported"),
    ("host-os-ubuntu2004", "dra", "os-deprecated"),
    ("host-foundation-only", "dra", None),
])
def test_failure_codes_on_fixture_hosts(name, path, code):
    assert_code(name, path, "os-supported", code)
