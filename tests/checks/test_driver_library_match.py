"""driver-library-match on fixture hosts: the loaded module against userspace libnvidia-ml."""
import pytest

from tests.checks.host_stack import assert_code, assert_row


@pytest.mark.parametrize(
    "name, path, check_id, status, needle",
    [
        ("host-driver-library-mismatch", "dra", "driver-library-match", "fail", "kernel module 580.173.02, userspace libnvidia-ml 580.178"),
    ],
)
def test_each_failure_has_a_fixture_host(name, path, check_id, status, needle):
    assert_row(name, path, check_id, status, needle)


@pytest.mark.parametrize("name, path, code", [
    ("host-jetson", "dra", "version-unreadable"),
    ("host-driver-library-mismatch", "dra", "library-mismatch"),
])
def test_failure_codes_on_fixture_hosts(name, path, code):
    assert_code(name, path, "driver-library-match", code)
