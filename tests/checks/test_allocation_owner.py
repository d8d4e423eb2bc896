"""allocation-owner on fixture hosts: one owner, the right one, and whether GPUs are in use
through it (host evidence); MPS sharing on the captured Node (its cluster part,
checks/allocation/cluster.py, on bundles whose host.json carries the `node` fact)."""
import json

import pytest

from agent.config import Config
from agent.host.seam import Host, StaticFacts
from checks.allocation.allocation_owner import ALLOCATION_OWNER, dp_pods, dra_claims
from checks.allocation.cluster import mps_conflict, node_unavailable_reason
from checks.policy import ResolvedPolicy, load_policy
from tests.checks.bundle_support import run_on_bundle
from tests.conftest import bundle


def run(name, path="dra", host=None):
    pol = ResolvedPolicy(load_policy(1), path, settings=Config().model_dump())
    if host is not None:
        return ALLOCATION_OWNER.run(host, pol)
    return run_on_bundle(ALLOCATION_OWNER, name, pol)


@pytest.mark.parametrize("path", ["device-plugin", "dra", "operator-clusterpolicy", "operator-gpucluster"])
def test_both_owners_fail_on_every_path_naming_the_files(path):
    out = run("owner-both", path)
    assert out.status == "fail"
    assert "/var/lib/kubelet/device-plugins/nvidia-gpu.sock" in out.summary
    assert "/var/lib/kubelet/plugins_registry/gpu.nvidia.com-reg.sock" in out.summary
    # kubelet's own registration socket is not a GPU owner
    assert "kubelet.sock" not in out.summary


def test_dra_claim_prepared_under_this_boot_is_in_use():
    out = run("owner-dra-in-use", "dra")
    assert out.status == "pass"
    usage = out.details["in_use"]
    assert usage["gpus_in_use"] is True
    assert usage["dra"]["boot_id_matches"] is True
    assert usage["dra"]["claims_prepared"] == ["7d3c2a8e-0000-4000-8000-000000000001"]
    assert usage["dra"]["claims_other_state"] == ["7d3c2a8e-0000-4000-8000-000000000002"]


def test_dra_checkpoint_from_a_previous_boot_does_not_count():
    usage = run("owner-dra-previous-boot", "dra").details["in_use"]
    assert usage["dra"]["boot_id_matches"] is False
    assert usage["dra"]["claims_prepared"] == [] and usage["gpus_in_use"] is False


def test_wrong_owner_for_the_path_fails():
    assert run("owner-dra-in-use", "device-plugin").status == "fail"
    out = run("owner-device-plugin-in-use", "dra")
    assert out.status == "fail" and "expects the DRA plugin" in out.summary


def test_device_plugin_pods_holding_nvidia_devices():
    out = run("owner-device-plugin-in-use", "device-plugin")
    assert out.status == "pass"
    dp = out.details["in_use"]["device_plugin"]
    assert dp == {"pods": ["5f0e1b2c-0000-4000-8000-00000000000a"], "resources": ["nvidia.com/gpu"]}
    assert out.details["in_use"]["gpus_in_use"] is True


def test_malformed_checkpoint_is_unknown_with_file_and_line():
    out = run("owner-malformed-checkpoint", "dra")
    assert out.status == "unknown"
    assert "/var/lib/kubelet/plugins/gpu.nvidia.com/checkpoint.json: line " in out.summary
    assert out.details["in_use"]["gpus_in_use"] is None


def test_mps_capable_label_blocks_the_device_plugin_path(tmp_path):
    facts = StaticFacts({"node": {"metadata": {"labels": {"nvidia.com/mps.capable": "true"}}}})
    (tmp_path / "var/lib/kubelet/device-plugins").mkdir(parents=True)
    (tmp_path / "var/lib/kubelet/device-plugins/kubelet.sock").write_text("")
    host = Host(tmp_path, facts=facts)
    out = run(None, "device-plugin", host)
    assert out.status == "fail" and "nvidia.com/mps.capable=true" in out.summary
    assert run(None, "dra", host).status == "pass"


def test_checkpoint_without_boot_id_is_not_proof_of_idle():
    claims = dra_claims({"v1": {"preparedClaims": {"u1": {}}}}, "boot")
    assert claims["boot_id_matches"] is None and claims["claims_unverified"] == ["u1"]
    assert dp_pods({"Data": {"PodDeviceEntries": "junk"}}) == {"pods": [], "resources": []}


def test_no_kubelet_is_skip_and_kubelet_without_owners_passes(tmp_path):
    out = run(None, "dra", Host(tmp_path))
    assert out.status == "skip" and "kubelet.sock absent" in out.summary
    (tmp_path / "var/lib/kubelet/device-plugins").mkdir(parents=True)
    (tmp_path / "var/lib/kubelet/device-plugins/kubelet.sock").write_text("")
    out = run(None, "dra", Host(tmp_path))
    assert out.status == "pass" and "none registered yet" in out.summary


def facts(name):
    with open(bundle(name) + "/host.json") as fh:
        return json.load(fh)


def test_mps_capable_blocks_only_the_device_plugin_path():
    node = facts("kube-mps-capable")["node"]
    assert "nvidia.com/mps.capable=true" in mps_conflict(node, "device-plugin")
    for path in ("dra", "operator-clusterpolicy", "operator-gpucluster"):
        assert mps_conflict(node, path) is None
    assert mps_conflict(facts("kube-runtimeclass-ok")["node"], "device-plugin") is None


def test_mps_unknown_when_the_node_is_unavailable():
    node = facts("kube-api-unreachable")["node"]
    assert mps_conflict(node, "device-plugin") is None
    assert "not reachable" in node_unavailable_reason(node)
    assert "not captured" in node_unavailable_reason(None)
    assert node_unavailable_reason(facts("kube-mps-capable")["node"]) is None


@pytest.mark.parametrize("name, path, code", [
    ("owner-both", "dra", "two-owners"),
    ("owner-device-plugin-in-use", "dra", "wrong-owner"),
    ("owner-dra-in-use", "device-plugin", "wrong-owner"),
    ("owner-malformed-checkpoint", "dra", "checkpoint-unreadable"),
    ("kube-mps-capable", "device-plugin", "mps-blocks-exclusive"),
    ("owner-dra-in-use", "dra", None),
])
def test_failure_codes(name, path, code):
    assert run(name, path).code == code
