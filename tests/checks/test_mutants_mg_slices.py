"""gpu-capacity on the DRA paths (checks/allocation/slices.py): the ResourceSlice reader and
the whole Outcome of each branch, value by value.

Expected values are written by hand from the module's documented behaviour and its sources:
a ResourceSlice's spec names its driver, its node (spec.nodeName) and its pool
(spec.pool.name, spec.pool.generation: the API reference says slices of an older generation
of a pool are being replaced, so only each pool's newest counts); each device carries the
attributes `uuid` and, for a MIG device, `parentUUID` as DeviceAttribute {"string": ...}
(k8s-dra-driver-gpu cmd/gpu-kubelet-plugin/deviceinfo.go, GetDevice). A UUID the host does not
have fails; a healthy GPU that no device names (itself, as a parent, or through one of its MIG
devices) fails; a MIG device of a GPU whose MIG devices the snapshot does not list cannot be
checked. The summary names the first eight UUIDs and counts the rest.
"""
import pytest

from agent.config import Config
from agent.host.seam import Host, StaticFacts, StaticGpus
from agent.model import SKIP_INPUT_MISSING, Outcome, Status
from checks.allocation.gpu_capacity import GPU_CAPACITY
from checks.policy import ResolvedPolicy, load_policy
from tests.checks.test_mutants_mg_gpu_capacity import snapshot

UUID = "GPU-03000300-0000-4000-8000-00000000000{}"
DRIVER = "gpu.nvidia.com"
NO_SLICE = ("no ResourceSlice of gpu.nvidia.com for this node yet (the DRA driver has not "
            "published): nothing to compare")


def gpu(i, mig=None):
    return {"index": i, "uuid": UUID.format(i), "pci_bus_id": f"00000000:{i + 10:02X}:00.0",
            "mig": mig or {"current": "disabled", "pending": "disabled"}}


def device(uuid, parent=None):
    attrs = {"uuid": {"string": uuid}}
    if parent is not None:
        attrs["parentUUID"] = {"string": parent}
    return {"name": uuid.lower(), "attributes": attrs}


def spec(devices, pool="n1", generation=1, node_name="n1", driver=DRIVER):
    return {"spec": {"driver": driver, "nodeName": node_name,
                     "pool": {"name": pool, "generation": generation}, "devices": devices}}


def judge(tmp_path, snap, slices, path="dra"):
    (tmp_path / "proc/sys/kernel/random").mkdir(parents=True, exist_ok=True)
    (tmp_path / "proc/sys/kernel/random/boot_id").write_text("b1\n")
    facts = {"node": {"kind": "Node", "metadata": {"name": "n1"}, "status": {}}}
    if slices is not None:
        facts["resourceslices"] = slices
    h = Host(tmp_path, facts=StaticFacts(facts), gpus=StaticGpus(snap))
    pol = ResolvedPolicy(load_policy(2), path, settings=Config().model_dump())
    return GPU_CAPACITY.run(h, pol)


def listing(*items):
    return {"node": "n1", "items": list(items)}


def details(slices, published, host):
    return {"slices": slices, "published_uuids": sorted(published), "host_uuids": sorted(host),
            "published_count": len(published), "host_count": len(host)}


def matched(n_devices, n_slices, published, host):
    return Outcome(Status.PASS, f"{n_devices} device(s) in {n_slices} ResourceSlice(s) match the "
                   "host's GPUs by UUID", details(n_slices, published, host))


# -- the fact ------------------------------------------------------------------------------
@pytest.mark.parametrize("path", ["dra", "operator-gpucluster"])
def test_slices_not_captured_skip_naming_the_api(tmp_path, path):
    assert judge(tmp_path, snapshot(gpu(0)), None, path) == Outcome(
        Status.SKIP, "this node's ResourceSlices are not captured (needs the Kubernetes API)", {},
        skip=SKIP_INPUT_MISSING)


def test_a_fact_that_is_not_an_object_is_unreadable_naming_its_type(tmp_path):
    assert judge(tmp_path, snapshot(gpu(0)), ["junk"]) == Outcome(
        Status.UNKNOWN, "cannot list this node's ResourceSlices: list", {},
        code="slices-unreadable")


def test_the_api_error_is_cut_at_200_characters(tmp_path):
    error = "e" * 199 + "LAST" + "z" * 100
    assert judge(tmp_path, snapshot(gpu(0)), {"error": error}) == Outcome(
        Status.UNKNOWN, "cannot list this node's ResourceSlices: " + "e" * 199 + "L", {},
        code="slices-unreadable")


@pytest.mark.parametrize("items", [None, 7])
def test_items_that_are_not_a_list_are_no_slices(tmp_path, items):
    assert judge(tmp_path, snapshot(gpu(0)), {"node": "n1", "items": items}) == Outcome(
        Status.SKIP, NO_SLICE, {}, skip=SKIP_INPUT_MISSING)


# -- which slices are this node's current ones ----------------------------------------------
def test_another_nodes_slice_is_not_read(tmp_path):
    slices = listing(spec([device(UUID.format(0))]),
                     spec([device("GPU-0badbeef-0000-4000-8000-000000000009")], pool="n2",
                          node_name="n2"))
    assert judge(tmp_path, snapshot(gpu(0)), slices) == matched(
        1, 1, [UUID.format(0)], [UUID.format(0)])


def test_another_drivers_slice_before_this_one_does_not_end_the_reading(tmp_path):
    slices = listing(spec([device("NIC-0")], driver="example.com/nic"),
                     spec([device(UUID.format(0))]))
    assert judge(tmp_path, snapshot(gpu(0)), slices) == matched(
        1, 1, [UUID.format(0)], [UUID.format(0)])


def test_each_pool_keeps_its_own_newest_generation(tmp_path):
    slices = listing(spec([device(UUID.format(0))], pool="a", generation=1),
                     spec([device(UUID.format(1))], pool="b", generation=2))
    both = [UUID.format(0), UUID.format(1)]
    assert judge(tmp_path, snapshot(gpu(0), gpu(1)), slices) == matched(2, 2, both, both)


def test_a_generation_that_is_not_a_number_counts_as_zero(tmp_path):
    # Generation "5" (a string) is 0: generation 1 of the same pool is the newest.
    slices = listing(spec([device("GPU-57a1e000-0000-4000-8000-000000000000")], generation="5"),
                     spec([device(UUID.format(0))], generation=1))
    assert judge(tmp_path, snapshot(gpu(0)), slices) == matched(
        1, 1, [UUID.format(0)], [UUID.format(0)])


def test_a_slice_whose_devices_are_not_a_list_adds_none(tmp_path):
    slices = listing(spec(None), spec([device(UUID.format(0))]))
    assert judge(tmp_path, snapshot(gpu(0)), slices) == matched(
        1, 2, [UUID.format(0)], [UUID.format(0)])


# -- unknown UUIDs -------------------------------------------------------------------------
STRAY = [f"GPU-0badbeef-0000-4000-8000-00000000000{i}" for i in range(9)]


@pytest.mark.parametrize("n, more", [(8, ""), (9, " and 1 more")])
def test_the_summary_names_eight_unknown_uuids_and_counts_the_rest(tmp_path, n, more):
    slices = listing(spec([device(UUID.format(0))] + [device(u) for u in STRAY[:n]]))
    assert judge(tmp_path, snapshot(gpu(0)), slices) == Outcome(
        Status.FAIL, "ResourceSlice device UUID(s) the host does not have: "
        + ", ".join(STRAY[:8]) + more,
        details(1, [UUID.format(0)] + STRAY[:n], [UUID.format(0)]), code="slice-device-unknown")


# -- missing GPUs --------------------------------------------------------------------------
def test_a_healthy_gpu_in_no_slice_fails_with_the_details(tmp_path):
    slices = listing(spec([device(UUID.format(0))]))
    assert judge(tmp_path, snapshot(gpu(0), gpu(1)), slices) == Outcome(
        Status.FAIL, f"healthy GPU(s) in no ResourceSlice of gpu.nvidia.com: {UUID.format(1)}",
        details(1, [UUID.format(0)], [UUID.format(0), UUID.format(1)]),
        code="slice-device-missing")


def test_mig_devices_without_a_parent_attribute_cover_their_gpu(tmp_path):
    snap = snapshot(gpu(0, {"current": "enabled", "pending": "enabled",
                            "devices": [{"uuid": "MIG-a"}, {"uuid": "MIG-b"}]}))
    slices = listing(spec([device("MIG-a"), device("MIG-b")]))
    assert judge(tmp_path, snap, slices) == matched(
        2, 1, ["MIG-a", "MIG-b"], [UUID.format(0), "MIG-a", "MIG-b"])


def test_a_parent_uuid_covers_a_gpu_whose_mig_devices_are_not_listed(tmp_path):
    # The snapshot does not list GPU 0's MIG devices: MIG-x cannot be checked (not unknown),
    # and its parentUUID names GPU 0 (not missing).
    snap = snapshot(gpu(0, {"current": "enabled", "pending": "enabled"}))
    slices = listing(spec([device("MIG-x", parent=UUID.format(0))]))
    assert judge(tmp_path, snap, slices) == matched(1, 1, ["MIG-x"], [UUID.format(0)])
