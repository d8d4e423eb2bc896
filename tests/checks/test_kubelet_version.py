"""kubelet-version on fixture hosts: the DRA paths' minimum (policy_v1.yaml), not gated elsewhere."""
import pytest

from tests.checks.host_stack import assert_code, assert_row


@pytest.mark.parametrize(
    "name, path, check_id, status, needle",
    [
        ("host-kubelet-133", "dra", "kubelet-version", "fail", "1.33.5 is below 1.34.2"),
        ("host-kubelet-133", "device-plugin", "kubelet-version", "pass", "not gated"),
    ],
)
def test_each_failure_has_a_fixture_host(name, path, check_id, status, needle):
    assert_row(name, path, check_id, status, needle)


@pytest.mark.parametrize("name, path, code", [
    ("host-no-driver", "dra", "kubelet-missing"),
    ("host-kubelet-133", "dra", "kubelet-too-old"),
    ("host-kubelet-133", "device-plugin", None),
])
def test_failure_codes_on_fixture_hosts(name, path, code):
    assert_code(name, path, "kubelet-version", code)
