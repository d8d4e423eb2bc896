"""gpu-ecc made sticky (docs/xid.md, sticky faults; the check's code is checks/gpu/gpu_ecc.py, the state and its
clear semantics agent/xid/state.py): an uncorrectable ECC fault the daemon recorded keeps gpu-ecc
failing after the volatile counters read 0 again, until a reboot (new boot id), an observed
GPU reset or `gpu-node-agent clear`. Bundles xid-ecc-sticky* are gpu-h100-snapshot-only (all
counters 0) plus a state in host.json."""

import pytest

from tests.conftest import bundle, run_cli


def gpu_ecc(name):
    res = run_cli(["check", "--bundle", bundle(name), "--only", "gpu-ecc", "--format", "json"])
    assert res.rc in (0, 1), res.err
    (check,) = [c for c in res.json()["checks"] if c["id"] == "gpu-ecc"]
    return check


@pytest.mark.parametrize(
    "name, status, needle",
    [
        ("gpu-h100-snapshot-only", "pass", "no uncorrectable ECC errors"),
        ("xid-ecc-sticky", "fail", "GPU 3 (0000:4b:00) 2 volatile uncorrectable ECC error(s) recorded"),
        ("xid-ecc-sticky-cleared", "pass", "no uncorrectable ECC errors"),
        ("xid-ecc-sticky-old-boot", "pass", "no uncorrectable ECC errors"),
    ],
)
def test_sticky_ecc(name, status, needle):
    check = gpu_ecc(name)
    assert check["status"] == status, check["summary"]
    assert needle in check["summary"]
