"""checks/allocation (sharing.py, allocation_owner.py, slices.py): the edges of the sharing
evidence, the allocatable counts and the owner check's policy handling, value by value.

Expected values are written by hand from the sources the modules cite:
- an allocatable device count is a whole number (the device plugin API counts devices);
  sharing.count takes 0 up to 999999 ("[0-9]{1,6}" for strings, the same range for ints);
- status.allocatable keeps only nvidia.com/* resources; a Node fact {"error": ...} is the
  API's failure (agent/kube/facts.py), so no allocatable at all;
- the device plugin's config (k8s-device-plugin api/config/v1 sharing.go,
  ReplicatedResource): sharing.timeSlicing / sharing.mps resources with `replicas`; a
  resource is shared only with replicas above 1;
- GFD labels (internal/lm/resource.go baseLabeler): <resource>.replicas holds the count,
  <resource>.sharing-strategy the strategy name.
"""
from types import SimpleNamespace

import pytest

from agent.config import Config
from agent.host.seam import Host, StaticFacts, StaticGpus
from agent.model import Status
from checks.allocation.allocation_owner import ALLOCATION_OWNER, _config_files, sharing_policy
from checks.allocation.cluster import node_labels, node_unavailable_reason
from checks.allocation.sharing import (
    config_replicas,
    count,
    evidence,
    gpu_units,
    nvidia_allocatable,
)
from checks.policy import ResolvedPolicy, load_policy

DP_DIR = "/var/lib/kubelet/device-plugins/"
KUBELET_SOCK = DP_DIR + "kubelet.sock"
DP_GPU = DP_DIR + "nvidia-gpu.sock"
# policy version 1's sharing verdicts (checks/allocation/policy.py, _v1_allowed)
V1_ALLOWED = {"device-plugin": ["time-slicing"], "dra": ["time-slicing", "mps"],
              "operator-clusterpolicy": ["time-slicing", "mps"],
              "operator-gpucluster": ["time-slicing", "mps"]}


def make_host(tmp_path, files=None, node=None, gpus=None):
    for path, text in (files or {}).items():
        p = tmp_path / path.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)  # a bundle records a socket as an empty regular file
    facts = {"node": node} if node is not None else {}
    return Host(tmp_path, facts=StaticFacts(facts), gpus=StaticGpus(gpus))


def labelled(labels, allocatable=None):
    node = {"metadata": {"labels": labels}}
    if allocatable is not None:
        node["status"] = {"allocatable": allocatable}
    return node


# -- count ---------------------------------------------------------------------------------
@pytest.mark.parametrize("value, expected", [
    (0, 0), ("0", 0), (60, 60), (999999, 999999), ("999999", 999999),
    (10**6, None), ("1000000", None), (-1, None)])
def test_device_counts_are_whole_numbers_from_0_to_999999(value, expected):
    assert count(value) == expected


# -- nvidia_allocatable ------------------------------------------------------------------------
def test_allocatable_keeps_nvidia_counts_including_zero():
    node = labelled({}, {"nvidia.com/gpu": 0, "nvidia.com/gpu.shared": "4",
                         "example.com/fpga": "2", "cpu": "64", "nvidia.com/mig-1g.10gb": "7k"})
    assert nvidia_allocatable(node) == {"nvidia.com/gpu": 0, "nvidia.com/gpu.shared": 4}


def test_allocatable_of_a_node_the_api_did_not_return_is_none():
    node = {"error": "forbidden", "status": {"allocatable": {"nvidia.com/gpu": "8"}}}
    assert nvidia_allocatable(node) is None


# -- config_replicas -----------------------------------------------------------------------
def test_every_configured_file_is_read_past_an_absent_and_a_broken_one(tmp_path):
    good = ("sharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n"
            "      replicas: 3\n")
    host = make_host(tmp_path, {"/etc/broken.yaml": "sharing: [\n", "/etc/dp.yaml": good})
    found, problems = config_replicas(host, ["/etc/absent.yaml", "/etc/broken.yaml",
                                             "/etc/dp.yaml"])
    assert found == [{"file": "/etc/dp.yaml", "strategy": "time-slicing",
                      "resource": "nvidia.com/gpu", "replicas": 3}]
    assert len(problems) == 1 and problems[0].startswith("/etc/broken.yaml: ")


@pytest.mark.parametrize("text", [
    "- sharing\n",                           # the document is a list
    "sharing: [timeSlicing]\n",              # sharing is a list
    "sharing:\n  mps: [resources]\n",        # a section is a list
    "sharing:\n  mps:\n    resources: [nvidia.com/gpu, 4]\n",  # entries that are not objects
])
def test_config_of_the_wrong_shape_names_no_sharing(tmp_path, text):
    host = make_host(tmp_path, {"/etc/dp.yaml": text})
    assert config_replicas(host, ["/etc/dp.yaml"]) == ([], [])


@pytest.mark.parametrize("replicas, shared", [(1, False), (2, True), (0, False)])
def test_config_sharing_starts_at_two_replicas(tmp_path, replicas, shared):
    text = (f"sharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n"
            f"      replicas: {replicas}\n    - name: nvidia.com/gpu\n")
    host = make_host(tmp_path, {"/etc/dp.yaml": text})
    expected = [{"file": "/etc/dp.yaml", "strategy": "mps", "resource": "nvidia.com/gpu",
                 "replicas": replicas}] if shared else []
    assert config_replicas(host, ["/etc/dp.yaml"]) == (expected, [])


# -- gpu_units -----------------------------------------------------------------------------
def test_gpu_units_count_an_entry_that_is_not_an_object_as_one_gpu():
    assert gpu_units({"gpus": ["junk", {"index": 1}, None]}) == 3


# -- evidence ------------------------------------------------------------------------------
def test_evidence_names_each_source_of_sharing(tmp_path):
    node = labelled({"nvidia.com/gpu.sharing-strategy": "Time-Slicing",
                     "nvidia.com/gpu.replicas": "2"})
    host = make_host(tmp_path, {DP_DIR + "nvidia-gpu.shared.sock": ""}, node)
    assert evidence(host, node, []) == {"found": [
        {"strategy": "time-slicing", "source": "socket",
         "detail": f"{DP_DIR}nvidia-gpu.shared.sock serves nvidia.com/gpu.shared (a renamed "
                   "shared resource)"},
        {"strategy": "time-slicing", "source": "labels", "detail": "nvidia.com/gpu.replicas=2"},
        {"strategy": "time-slicing", "source": "labels",
         "detail": "nvidia.com/gpu.sharing-strategy=time-slicing"},
    ], "replicas": 2, "problems": []}


def test_a_number_in_the_strategy_label_is_no_replica_count(tmp_path):
    node = labelled({"nvidia.com/gpu.sharing-strategy": "3"})
    assert evidence(make_host(tmp_path, node=node), node, []) == {
        "found": [], "replicas": 1, "problems": []}


# -- allocation-owner's policy handling ----------------------------------------------------
def test_sharing_policy_defaults_when_the_policy_has_none():
    for policy in (SimpleNamespace(), SimpleNamespace(policy=SimpleNamespace()),
                   SimpleNamespace(policy=SimpleNamespace(sharing=None))):
        assert sharing_policy(policy).allowed == V1_ALLOWED


def test_config_files_are_none_when_the_policy_has_no_settings():
    # a policy object without setting() (as the stand-ins above): no plugin config file
    assert _config_files(SimpleNamespace()) == []


def test_owner_check_runs_without_settings(tmp_path):
    # A ResolvedPolicy without the config's settings: no plugin config file is read.
    host = make_host(tmp_path, {KUBELET_SOCK: "", DP_GPU: ""})
    out = ALLOCATION_OWNER.run(host, ResolvedPolicy(load_policy(1), "device-plugin"))
    assert out.status == Status.PASS
    assert out.summary == f"one owner as the device-plugin path expects ({DP_GPU}); GPUs in use: no"


def test_owner_check_ignores_a_config_file_list_that_is_not_a_list(tmp_path):
    host = make_host(tmp_path, {KUBELET_SOCK: "", DP_GPU: ""})
    settings = Config().model_dump()
    settings["gpu"] = {**settings["gpu"], "device_plugin_config_files": None}
    out = ALLOCATION_OWNER.run(host, ResolvedPolicy(load_policy(2), "device-plugin",
                                                    settings=settings))
    assert out.status == Status.PASS and "sharing" not in out.details


# -- evidence: the replicas label's strategy -----------------------------------------------
def replicas_entry(strategy, n, key="nvidia.com/gpu.replicas"):
    return {"strategy": strategy, "source": "labels", "detail": f"{key}={n}"}


def test_replicas_take_the_strategy_the_strategy_label_names_in_any_case(tmp_path):
    node = labelled({"nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.sharing-strategy": "MPS"})
    assert evidence(make_host(tmp_path, node=node), node, [])["found"] == [
        replicas_entry("mps", 4),
        {"strategy": "mps", "source": "labels", "detail": "nvidia.com/gpu.sharing-strategy=mps"}]


def test_named_time_slicing_wins_over_the_mps_label(tmp_path):
    node = labelled({"nvidia.com/gpu.replicas": "2",
                     "nvidia.com/gpu.sharing-strategy": "time-slicing",
                     "nvidia.com/mps.capable": "true"})
    assert evidence(make_host(tmp_path, node=node), node, [])["found"] == [
        replicas_entry("time-slicing", 2),
        {"strategy": "time-slicing", "source": "labels",
         "detail": "nvidia.com/gpu.sharing-strategy=time-slicing"},
        {"strategy": "mps", "source": "labels", "detail": "nvidia.com/mps.capable=true"}]


def test_replicas_without_a_strategy_label_are_mps_on_an_mps_capable_node(tmp_path):
    node = labelled({"nvidia.com/gpu.replicas": "3", "nvidia.com/mps.capable": "TRUE"})
    assert evidence(make_host(tmp_path, node=node), node, []) == {"found": [
        replicas_entry("mps", 3),
        {"strategy": "mps", "source": "labels", "detail": "nvidia.com/mps.capable=true"}],
        "replicas": 3, "problems": []}


def test_a_config_naming_only_mps_makes_the_other_signs_mps(tmp_path):
    text = "sharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n"
    host = make_host(tmp_path, {DP_DIR + "nvidia-gpu.shared.sock": "", "/etc/dp.yaml": text})
    assert [f["strategy"] for f in evidence(host, None, ["/etc/dp.yaml"])["found"]] == [
        "mps", "mps"]


# -- evidence: allocatable above the GPUs --------------------------------------------------
EIGHT_GPUS = {"gpus": [{"index": i} for i in range(8)]}


@pytest.mark.parametrize("allocatable, detail", [
    ({"nvidia.com/gpu": "8", "nvidia.com/gpu.shared": "8"},
     "allocatable nvidia.com/gpu 16 on 8 GPU(s)"),
    ({"nvidia.com/gpu.shared": "8"}, None),   # no nvidia.com/gpu counts as 0
    ({"nvidia.com/gpu": "8"}, None),
])
def test_allocatable_adds_the_shared_resource_to_the_gpus(tmp_path, allocatable, detail):
    node = labelled({}, allocatable)
    found = evidence(make_host(tmp_path, node=node, gpus=EIGHT_GPUS), node, [])["found"]
    assert found == ([{"strategy": "time-slicing", "source": "allocatable", "detail": detail}]
                     if detail else [])


# -- cluster.node_labels -------------------------------------------------------------------
def test_node_labels_of_an_api_error_are_none_and_of_a_bad_shape_empty():
    assert node_labels({"error": "forbidden", "metadata": {"labels": {"a": "b"}}}) is None
    assert node_labels({"metadata": {"labels": ["a=b"]}}) == {}
    assert node_labels({"metadata": ["labels"]}) == {}  # metadata not an object: no labels
    assert node_labels({"metadata": {"labels": {"a": 1}}}) == {"a": "1"}


# -- allocation-owner's sharing verdict -----------------------------------------------------
def owner(tmp_path, path, version, node, overrides=None, extra=()):
    files = {KUBELET_SOCK: "", **{p: "" for p in extra}}
    if path in ("dra", "operator-gpucluster"):
        files["/var/lib/kubelet/plugins/gpu.nvidia.com/dra.sock"] = ""
    else:
        files[DP_GPU] = ""
    host = make_host(tmp_path, files, node)
    pol = ResolvedPolicy(load_policy(version, overrides), path, settings=Config().model_dump())
    return ALLOCATION_OWNER.run(host, pol)


def test_two_strategies_refused_are_named_together_with_each_sign(tmp_path):
    node = labelled({"nvidia.com/gpu.sharing-strategy": "time-slicing",
                     "nvidia.com/mps.capable": "true"})
    out = owner(tmp_path, "device-plugin", 2, node)
    assert (out.status, out.code) == (Status.FAIL, "sharing-not-allowed")
    assert out.summary == (
        "GPUs shared by mps and time-slicing (nvidia.com/gpu.sharing-strategy=time-slicing; "
        "nvidia.com/mps.capable=true), which the exclusive device-plugin path does not allow")


def test_a_path_that_is_not_exclusive_is_named_plainly(tmp_path):
    node = labelled({"nvidia.com/gpu.replicas": "2"})
    out = owner(tmp_path, "dra", 2, node, {"sharing": {"allowed": {"dra": []}}})
    assert (out.status, out.code) == (Status.FAIL, "sharing-not-allowed")
    assert out.summary == ("GPUs shared by time-slicing (nvidia.com/gpu.replicas=2), which the "
                           "dra path does not allow")


def test_the_mps_label_wording_is_only_for_an_mps_refusal(tmp_path):
    # MPS allowed on device-plugin by the policy, time-slicing not: the one refused sign is the
    # strategy label, and the summary names it (not the MPS label's sentence).
    node = labelled({"nvidia.com/gpu.sharing-strategy": "time-slicing",
                     "nvidia.com/mps.capable": "true"})
    out = owner(tmp_path, "device-plugin", 2, node,
                {"sharing": {"allowed": {"device-plugin": ["mps"]}}})
    assert (out.status, out.code) == (Status.FAIL, "sharing-not-allowed")
    assert out.summary == (
        "GPUs shared by time-slicing (nvidia.com/gpu.sharing-strategy=time-slicing), which the "
        "exclusive device-plugin path does not allow")


def test_sharing_allowed_on_the_path_is_noted_in_the_pass(tmp_path):
    node = labelled({"nvidia.com/gpu.sharing-strategy": "time-slicing",
                     "nvidia.com/mps.capable": "true"})
    out = owner(tmp_path, "dra", 2, node)
    assert out.status == Status.PASS
    assert out.summary == (
        "one owner as the dra path expects (/var/lib/kubelet/plugins/gpu.nvidia.com/dra.sock); "
        "GPUs in use: no; sharing: mps and time-slicing (allowed on this path)")


def test_node_unavailable_reason_names_why_cut_at_200():
    assert node_unavailable_reason(None) == (
        "the Node is not captured for this host (needs the Kubernetes API)")
    assert node_unavailable_reason({"error": "forbidden"}) == (
        "Kubernetes API not reachable: forbidden")
    assert node_unavailable_reason({"error": "x" * 300}) == (
        "Kubernetes API not reachable: " + "x" * 200)
    assert node_unavailable_reason({"metadata": {}}) is None
