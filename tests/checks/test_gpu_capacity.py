"""gpu-capacity over the sharing fixture bundles and small hand-built hosts, under both policy
versions (it arrives in version 2: skip not-applicable under a config pinned to 1, by the
engine's since_policy rule).

Expected values written from the sources: the device plugin's allocatable counts only the
devices it reports healthy (k8s-device-plugin ListAndWatch; the kubelet device manager), so
allocatable lies between the healthy GPUs and all of them, times the time-slicing replicas
(README "Shared Access to GPUs": each replica is one allocatable unit); a ResourceSlice device
carries its GPU's UUID in attribute `uuid` (k8s-dra-driver-gpu deviceinfo.go).
"""
import pytest

from agent.config import Config
from agent.host.bundle import load_bundle
from agent.host.seam import Host, StaticFacts, StaticGpus
from agent.model import SKIP_INPUT_MISSING, SKIP_NOT_APPLICABLE
from checks.allocation.gpu_capacity import GPU_CAPACITY
from checks.policy import ResolvedPolicy, load_policy
from tests.checks.bundle_support import run_on_bundle
from tests.conftest import bundle

UUID = "GPU-01000100-0000-0000-0000-00000000000{}"


def run(name, path="device-plugin", config=None, version=2):
    cfg = config or Config()
    pol = ResolvedPolicy(load_policy(version), path, settings=cfg.model_dump())
    return run_on_bundle(GPU_CAPACITY, name, pol)


@pytest.mark.parametrize("path", ["device-plugin", "operator-clusterpolicy"])
def test_six_on_eight_healthy_fails(path):
    out = run("gpu-capacity-6-of-8", path)
    assert out.status == "fail" and out.code == "allocatable-below-healthy"
    assert out.summary.startswith("allocatable nvidia.com/gpu 6 is below the host's 8 healthy "
                                  "of 8 GPU(s)")
    assert out.details["healthy_units"] == 8 and out.details["units"] == 8


def test_seven_on_eight_with_one_sticky_fault_passes_naming_the_gpu():
    out = run("gpu-capacity-7-of-8-one-unhealthy")
    assert out.status == "pass"
    assert "within 7..8 (8 GPU(s), 7 healthy)" in out.summary
    assert out.details["unhealthy"] == ["GPU 5 (Xid 48: double bit ECC error)"]


def test_eight_on_eight_passes():
    out = run("gpu-capacity-8-of-8")
    assert out.status == "pass" and "within 8..8" in out.summary


def test_thirty_two_on_eight_without_sharing_fails_and_with_replicas_passes():
    out = run("allocation-owner-timeslicing-allocatable")
    assert out.status == "fail" and out.code == "allocatable-above-host"
    assert out.summary == ("allocatable nvidia.com/gpu 32 is above the host's 8 GPU(s) and no "
                           "sharing configured")
    # the same 32 with nvidia.com/gpu.replicas=4: 8 x 4, within range
    ok = run("allocation-owner-timeslicing-labels")
    assert ok.status == "pass" and "within 32..32" in ok.summary and "x 4 replicas" in ok.summary
    # renamed: nvidia.com/gpu.shared counts too
    shared = run("allocation-owner-timeslicing-socket")
    assert shared.status == "pass" and "nvidia.com/gpu.shared 32" in shared.summary


def test_before_join_skips_on_every_path():
    for path in ("device-plugin", "dra", "operator-clusterpolicy", "operator-gpucluster"):
        out = run("gpu-capacity-before-join", path)
        assert out.status == "skip" and out.skip == SKIP_INPUT_MISSING
        assert "before the node joins: Kubernetes API not reachable" in out.summary


@pytest.mark.parametrize("path", ["dra", "operator-gpucluster"])
def test_resourceslices_by_uuid(path):
    assert run("gpu-capacity-slices-match", path).status == "pass"
    bad = run("gpu-capacity-slices-mismatch", path)
    assert bad.code == "slice-device-unknown"
    assert bad.summary == ("ResourceSlice device UUID(s) the host does not have: "
                           "GPU-0badbeef-0000-4000-8000-000000000007")
    missing = run("gpu-capacity-slices-missing", path)
    assert missing.code == "slice-device-missing"
    assert missing.summary.endswith(UUID.format(7))
    refused = run("gpu-capacity-slices-forbidden", path)
    assert refused.status == "unknown" and refused.code == "slices-unreadable"
    assert "HTTP 403" in refused.summary


def test_a_dra_host_is_not_judged_by_allocatable_nor_a_device_plugin_host_by_slices():
    out = run("gpu-capacity-slices-match", "device-plugin")
    assert out.status == "skip" and "advertises no nvidia.com/gpu yet" in out.summary
    out = run("gpu-capacity-8-of-8", "dra")
    assert out.status == "skip" and "ResourceSlices are not captured" in out.summary


def test_pinned_to_policy_v1_the_engine_skips_it_and_v2_judges():
    from agent.engine import Engine

    loaded = load_bundle(bundle("gpu-capacity-6-of-8"))
    try:
        settings = Config().model_dump()
        (pinned,) = Engine([GPU_CAPACITY]).run(
            loaded.host, ResolvedPolicy(load_policy(1), "device-plugin", settings=settings))
        (newest,) = Engine([GPU_CAPACITY]).run(
            loaded.host, ResolvedPolicy(load_policy(2), "device-plugin", settings=settings))
    finally:
        loaded.close()
    assert (pinned.status, pinned.skip) == ("skip", SKIP_NOT_APPLICABLE)
    assert "pins policy_version 1" in pinned.summary
    assert (newest.status, newest.code) == ("fail", "allocatable-below-healthy")


# -- hand-built hosts ----------------------------------------------------------------------
def gpus(n, mig=None):
    out = []
    for i in range(n):
        g = {"index": i, "uuid": UUID.format(i), "pci_bus_id": f"00000000:{i + 10:02X}:00.0",
             "mig": {"current": "disabled", "pending": "disabled"}}
        if mig is not None:
            g["mig"] = {"current": "enabled", "pending": "enabled", **mig(i)}
        out.append(g)
    return {"schema_version": 1, "error": None, "gpus": out, "device_count": n}


def host(tmp_path, node, snap, **facts):
    (tmp_path / "proc/sys/kernel/random").mkdir(parents=True, exist_ok=True)
    (tmp_path / "proc/sys/kernel/random/boot_id").write_text("b1\n")
    return Host(tmp_path, facts=StaticFacts({"node": node, **facts}), gpus=StaticGpus(snap))


def node(alloc, labels=None):
    return {"kind": "Node", "metadata": {"name": "n1", "labels": labels or {}},
            "status": {"allocatable": alloc}}


def judge(h, path="device-plugin", **cfg):
    pol = ResolvedPolicy(load_policy(2), path, settings=Config.model_validate(cfg).model_dump())
    return GPU_CAPACITY.run(h, pol)


def test_a_lost_gpu_is_not_healthy(tmp_path):
    snap = gpus(4)
    snap["gpus"][3] = {"index": 3, "error": {"kind": "nvml", "code": 15, "name": "gpu_is_lost"}}
    out = judge(host(tmp_path, node({"nvidia.com/gpu": "3"}), snap))
    assert out.status == "pass" and "GPU 3 (lost: NVML does not answer for it)" in out.summary


def test_a_cleared_sticky_fault_is_healthy_again(tmp_path):
    fault = {"gpu": {"index": 1, "uuid": UUID.format(1)}, "kind": "xid", "class": "reset-gpu",
             "last_mono_us": 100, "last_at": None, "message": "Xid 79"}
    clear = {"selector": "1", "pci": [], "classes": None, "mono_us": 200}
    sticky = {"boot_id": "b1", "faults": [fault], "clears": [clear]}
    out = judge(host(tmp_path, node({"nvidia.com/gpu": "3"}), gpus(4), sticky=sticky))
    assert out.code == "allocatable-below-healthy"  # 4 healthy: the clear covers the fault
    sticky["clears"] = []
    assert judge(host(tmp_path, node({"nvidia.com/gpu": "3"}), gpus(4), sticky=sticky)).status \
        == "pass"
    # a fault written in another boot does not count (a reboot clears it)
    sticky["boot_id"] = "b0"
    assert judge(host(tmp_path, node({"nvidia.com/gpu": "3"}), gpus(4), sticky=sticky)).code \
        == "allocatable-below-healthy"


def test_mig_mixed_counts_mig_devices_and_full_gpus(tmp_path):
    snap = gpus(2, mig=lambda i: {"devices": [{"uuid": f"MIG-{i}-{j}"} for j in range(3)]})
    snap["gpus"].append({"index": 2, "uuid": UUID.format(2),
                         "mig": {"current": "disabled", "pending": "disabled"}})
    alloc = {"nvidia.com/gpu": "1", "nvidia.com/mig-3g.40gb": "6"}
    out = judge(host(tmp_path, node(alloc), snap), gpu={"mig_strategy": "mixed"})
    assert out.status == "pass" and "within 7..7 (7 MIG device(s), 7 healthy)" in out.summary
    alloc["nvidia.com/mig-3g.40gb"] = "5"
    assert judge(host(tmp_path, node(alloc), snap), gpu={"mig_strategy": "mixed"}).code == \
        "allocatable-below-healthy"


def test_mig_devices_unknown_skip(tmp_path):
    snap = gpus(1, mig=lambda i: {})
    out = judge(host(tmp_path, node({"nvidia.com/gpu": "7"}), snap), gpu={"mig_strategy": "single"})
    assert out.status == "skip" and "MIG devices are not in the GPU snapshot" in out.summary


def test_zero_allocatable_is_judged_absent_is_not(tmp_path):
    assert judge(host(tmp_path, node({"nvidia.com/gpu": "0"}), gpus(2))).code == \
        "allocatable-below-healthy"
    assert judge(host(tmp_path, node({"cpu": "8"}), gpus(2))).skip == SKIP_INPUT_MISSING


def test_dra_mig_devices_by_uuid_and_parent(tmp_path):
    snap = gpus(1, mig=lambda i: {"devices": [{"uuid": "MIG-a"}, {"uuid": "MIG-b"}]})

    def sl(*devs):
        return {"node": "n1", "items": [{"spec": {
            "driver": "gpu.nvidia.com", "nodeName": "n1", "pool": {"name": "n1", "generation": 3},
            "devices": [{"name": f"d{i}", "attributes": {k: {"string": v} for k, v in d.items()}}
                        for i, d in enumerate(devs)]}}]}

    ok = sl({"uuid": "MIG-a", "parentUUID": UUID.format(0)}, {"uuid": "MIG-b"})
    assert judge(host(tmp_path, node({}), snap, resourceslices=ok), "dra").status == "pass"
    bad = sl({"uuid": "MIG-a"}, {"uuid": "MIG-z"})
    assert judge(host(tmp_path, node({}), snap, resourceslices=bad), "dra").code == \
        "slice-device-unknown"
    # an older generation of the pool is ignored; another driver's slices too
    old = sl({"uuid": "GPU-stale"})
    old["items"][0]["spec"]["pool"]["generation"] = 2
    other = sl({"uuid": "NOT-A-GPU"})
    other["items"][0]["spec"]["driver"] = "example.com/nic"
    ok["items"] += old["items"] + other["items"]
    assert judge(host(tmp_path, node({}), snap, resourceslices=ok), "dra").status == "pass"


def test_not_a_node_and_no_slices_skip(tmp_path):
    assert judge(host(tmp_path, [1, 2], gpus(1))).skip == SKIP_INPUT_MISSING
    empty = {"node": "n1", "items": []}
    out = judge(host(tmp_path, node({}), gpus(1), resourceslices=empty), "dra")
    assert out.skip == SKIP_INPUT_MISSING and "has not published" in out.summary


def test_a_garbage_sticky_state_counts_no_fault(tmp_path):
    sticky = {"boot_id": "b1", "faults": [7, "x", None], "clears": [1]}
    out = judge(host(tmp_path, node({"nvidia.com/gpu": "2"}), gpus(2), sticky=sticky))
    assert out.status == "pass" and "2 healthy" in out.summary
    # a clear whose time is not a number clears nothing: the fault on GPU 0 stands
    fault = {"gpu": {"index": 0}, "kind": "xid", "class": "reset-gpu", "last_mono_us": 5,
             "message": "Xid 79"}
    sticky = {"boot_id": "b1", "faults": [fault],
              "clears": [{"selector": "0", "pci": [], "mono_us": "soon"}]}
    out = judge(host(tmp_path, node({"nvidia.com/gpu": "1"}), gpus(2), sticky=sticky))
    assert out.status == "pass" and "GPU 0 (Xid 79)" in out.summary
