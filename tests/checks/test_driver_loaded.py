"""driver-loaded on fixture hosts, and the host-stack checks together on a healthy host.

Expected values are facts of the fixtures (the driver version in the real
/proc/driver/nvidia/version file, the branch minimums the policy cites), not copied output.
"""
import pytest

from tests.checks.host_stack import FOUNDATION, assert_code, assert_row, results


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
    ],
)
def test_each_failure_has_a_fixture_host(name, path, check_id, status, needle):
    assert_row(name, path, check_id, status, needle)


def test_missing_driver_skips_dependants_naming_the_owner():
    _, checks, _ = results("host-no-driver")
    assert checks["driver-loaded"]["status"] == "fail"
    for dependant in ("driver-branch", "driver-library-match"):
        assert checks[dependant]["status"] == "skip"
        assert checks[dependant]["skip"] == "needs:driver-loaded"
        assert "needs driver-loaded" in checks[dependant]["summary"]


@pytest.mark.parametrize("name, path, code", [
    ("host-no-driver", "dra", "module-not-loaded"),
    ("host-missing-dev-nodes", "dra", "dev-nodes-missing"),
    ("driver-loaded-dev-nodes-not-captured", "dra", "dev-nodes-unknown"),
    ("host-foundation-only", "dra", None),
])
def test_failure_codes_on_fixture_hosts(name, path, code):
    assert_code(name, path, "driver-loaded", code)
