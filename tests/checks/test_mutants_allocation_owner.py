"""checks/allocation/allocation_owner.py, outcome by outcome: the whole Outcome for each branch of
allocation-owner and the exact in-use evidence (dra_claims, dp_pods, in_use), so a changed
word, condition or detail key is caught.

Expected values are written by hand from the layouts the module cites: the DRA plugin's
checkpoint (k8s-dra-driver-gpu: v1 claims without a state count as PrepareCompleted, v2 has a
checkpointState per claim, nodeBootID at the top or in a section), kubelet's device-manager
checkpoint (pkg/kubelet/cm/devicemanager/checkpoint: Data.PodDeviceEntries), the sockets the
device plugin API and the DRA plugin registration use, and DRA_PATHS in agent/model.py.
"""
from typing import Any, Dict, Optional

import pytest

from agent.config import Config
from agent.host.seam import Host, StaticFacts
from agent.model import Outcome, Status
from checks.allocation.allocation_owner import ALLOCATION_OWNER, dp_pods, dra_claims, in_use
from checks.policy import ResolvedPolicy, load_policy

DP_DIR = "var/lib/kubelet/device-plugins"
KUBELET_SOCK = "/var/lib/kubelet/device-plugins/kubelet.sock"
DP_GPU = "/var/lib/kubelet/device-plugins/nvidia-gpu.sock"
DP_MIG = "/var/lib/kubelet/device-plugins/nvidia-mig.sock"
DRA_REG = "/var/lib/kubelet/plugins_registry/gpu.nvidia.com-reg.sock"
DRA_SOCK = "/var/lib/kubelet/plugins/gpu.nvidia.com/dra.sock"
DRA_CP = "/var/lib/kubelet/plugins/gpu.nvidia.com/checkpoint.json"
DP_CP = "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
BOOT = "/proc/sys/kernel/random/boot_id"

REMOVE_DP = ("Remove the NVIDIA device plugin from this node (its DaemonSet's "
             "nodeSelector/affinity, or devicePlugin.enabled=false in the GPU Operator's "
             "ClusterPolicy)")
REMOVE_DRA = ("Remove the NVIDIA DRA driver's kubelet plugin from this node (its Helm "
              "release's nodeSelector, or the GPU Operator's DRA setting)")
IDLE = {"current_boot_id": None, "dra": None, "device_plugin": None, "gpus_in_use": False}


def put(root, path: str, text: str = "") -> None:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)  # a bundle records a socket as an empty regular file


def host_with(root, files: Dict[str, str], node: Any = None) -> Host:
    for path, text in files.items():
        put(root, path, text)
    return Host(root, facts=StaticFacts({"node": node} if node is not None else {}))


def run(host: Host, path: str) -> Outcome:
    return ALLOCATION_OWNER.run(host, ResolvedPolicy(load_policy(1), path,
                                                     settings=Config().model_dump()))


def details(path: str, want: str, dp=(), dra=(), usage: Optional[Dict[str, Any]] = None):
    return {"path": path, "expected_owner": want, "device_plugin_sockets": list(dp),
            "dra_sockets": list(dra), "in_use": IDLE if usage is None else usage}


# -- dra_claims ----------------------------------------------------------------------------
def test_dra_claims_v2_states_under_the_current_boot():
    data = {"v2": {"nodeBootID": "b1", "preparedClaims": {
        "u2": {"checkpointState": "PrepareCompleted"},
        "u1": {"checkpointState": "PrepareStarted"},
        "u3": {},  # no state: completed (the v1 -> v2 conversion's rule)
        "u0": "junk",
    }}}
    assert dra_claims(data, "b1") == {
        "checkpoint_boot_id": "b1", "boot_id_matches": True, "claims_prepared": ["u0", "u2", "u3"],
        "claims_unverified": [], "claims_other_state": ["u1"]}


def test_dra_claims_from_another_boot_are_not_prepared():
    data = {"nodeBootID": "old", "preparedClaims": {"u1": {}}, "v1": {"nodeBootID": "b1"}}
    assert dra_claims(data, "b1") == {
        "checkpoint_boot_id": "old", "boot_id_matches": False, "claims_prepared": [],
        "claims_unverified": [], "claims_other_state": []}


@pytest.mark.parametrize("cp_boot, boot", [(None, "b1"), ("", "b1"), ("b1", None), ("b1", "")])
def test_dra_claims_without_both_boot_ids_are_unverified(cp_boot, boot):
    data = {"v1": {"nodeBootID": cp_boot, "preparedClaims": {"u1": {}, "u2": {}}},
            "v2": {"preparedClaims": {"u3": {"checkpointState": "PrepareFailed"}}}}
    assert dra_claims(data, boot) == {
        # an empty boot id is none: a later section without one leaves None
        "checkpoint_boot_id": cp_boot or None, "boot_id_matches": None, "claims_prepared": [],
        "claims_unverified": ["u1", "u2"], "claims_other_state": ["u3"]}


def test_dra_claims_boot_id_found_in_a_later_section_and_later_state_wins():
    data = {"v1": {"preparedClaims": {"u1": {}}},
            "v2": {"nodeBootID": "b1", "preparedClaims": {"u1": {"checkpointState": "X"}}}}
    assert dra_claims(data, "b1") == {
        "checkpoint_boot_id": "b1", "boot_id_matches": True, "claims_prepared": [],
        "claims_unverified": [], "claims_other_state": ["u1"]}


@pytest.mark.parametrize("data", [None, [], "x", {"v1": [], "v2": "x", "preparedClaims": []}])
def test_dra_claims_of_a_malformed_checkpoint_are_empty(data):
    assert dra_claims(data, "b1") == {
        "checkpoint_boot_id": None, "boot_id_matches": None, "claims_prepared": [],
        "claims_unverified": [], "claims_other_state": []}


# -- dp_pods -------------------------------------------------------------------------------
def test_dp_pods_nvidia_resources_only():
    entries = [
        {"PodUID": "p2", "ContainerName": "c", "ResourceName": "nvidia.com/gpu"},
        {"PodUID": "p1", "ResourceName": "nvidia.com/mig-1g.10gb"},
        {"PodUID": "p2", "ResourceName": "nvidia.com/gpu"},
        {"PodUID": 7, "ResourceName": "nvidia.com/gpu"},
        {"PodUID": "p3", "ResourceName": "example.com/fpga"},
        {"PodUID": "p4", "ResourceName": "xnvidia.com/gpu"},
        {"PodUID": "", "ResourceName": "nvidia.com/shared"},
        {"ResourceName": "nvidia.com/none"},
        {"PodUID": "p5", "ResourceName": 5},
        "junk",
    ]
    assert dp_pods({"Data": {"PodDeviceEntries": entries}}) == {
        "pods": ["7", "p1", "p2"], "resources": ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb"]}


@pytest.mark.parametrize("data", [None, [], {"Data": []}, {"Data": {"PodDeviceEntries": {}}},
                                  {"Data": {"PodDeviceEntries": 5}},
                                  {"Data": {"PodDeviceEntries": None}}])
def test_dp_pods_of_a_malformed_checkpoint_are_empty(data):
    assert dp_pods(data) == {"pods": [], "resources": []}


# -- in_use --------------------------------------------------------------------------------
def test_in_use_by_a_prepared_claim_under_this_boot(tmp_path):
    host = host_with(tmp_path, {BOOT: "b1\n", DRA_CP: '{"v2": {"nodeBootID": "b1", '
                                '"preparedClaims": {"u1": {}}}}'})
    assert in_use(host) == ({
        "current_boot_id": "b1",
        "dra": {"checkpoint_boot_id": "b1", "boot_id_matches": True, "claims_prepared": ["u1"],
                "claims_unverified": [], "claims_other_state": []},
        "device_plugin": None, "gpus_in_use": True}, [])


def test_in_use_by_a_device_plugin_pod(tmp_path):
    host = host_with(tmp_path, {DP_CP: '{"Data": {"PodDeviceEntries": [{"PodUID": "p1", '
                                '"ResourceName": "nvidia.com/gpu"}]}}'})
    assert in_use(host) == ({
        "current_boot_id": None, "dra": None,
        "device_plugin": {"pods": ["p1"], "resources": ["nvidia.com/gpu"]},
        "gpus_in_use": True}, [])


def test_in_use_is_unknown_with_unverified_claims_and_no_with_none(tmp_path):
    host = host_with(tmp_path, {DRA_CP: '{"preparedClaims": {"u1": {}}}',
                                DP_CP: '{"Data": {"PodDeviceEntries": []}}'})
    facts, errors = in_use(host)
    assert errors == [] and facts["gpus_in_use"] is None
    assert facts["device_plugin"] == {"pods": [], "resources": []}
    put(tmp_path, DRA_CP, '{"preparedClaims": {}}')
    facts, errors = in_use(host)
    assert errors == [] and facts["gpus_in_use"] is False


def test_in_use_is_unknown_on_a_corrupt_checkpoint_but_yes_when_a_pod_holds_gpus(tmp_path):
    host = host_with(tmp_path, {DRA_CP: "", DP_CP: "{"})
    facts, errors = in_use(host)
    assert errors == [f"{DRA_CP}: line 1: invalid JSON (Expecting value)",
                      f"{DP_CP}: line 1: invalid JSON (Expecting property name enclosed in "
                      "double quotes)"]
    assert facts == {"current_boot_id": None, "dra": None, "device_plugin": None,
                     "gpus_in_use": None}
    put(tmp_path, DP_CP, '{"Data": {"PodDeviceEntries": [{"PodUID": "p1", '
                         '"ResourceName": "nvidia.com/gpu"}]}}')
    facts, errors = in_use(host)
    assert len(errors) == 1 and facts["gpus_in_use"] is True


# -- allocation-owner ------------------------------------------------------------------
@pytest.mark.parametrize("path, want, fix", [("dra", "dra", REMOVE_DP),
                                             ("operator-gpucluster", "dra", REMOVE_DP),
                                             ("device-plugin", "device-plugin", REMOVE_DRA),
                                             ("operator-clusterpolicy", "device-plugin", REMOVE_DRA)])
def test_two_owners_fail_removing_the_one_the_path_does_not_expect(tmp_path, path, want, fix):
    host = host_with(tmp_path, {DP_MIG: "", DP_GPU: "", DRA_REG: "", DRA_SOCK: "", KUBELET_SOCK: ""})
    assert run(host, path) == Outcome(
        Status.FAIL,
        f"both the device plugin ({DP_GPU}, {DP_MIG}) and the DRA plugin ({DRA_REG}, {DRA_SOCK}) "
        "publish GPUs on this node",
        details(path, want, [DP_GPU, DP_MIG], [DRA_REG, DRA_SOCK]),
        f"{fix}: two owners hand out the same GPUs twice. Drain GPU pods first.",
        code="two-owners",
    )


def test_device_plugin_on_a_dra_path_fails(tmp_path):
    host = host_with(tmp_path, {DP_GPU: "", KUBELET_SOCK: ""})
    (tmp_path / DP_DIR / "nvidia-dir.sock").mkdir()  # matches the glob, not a socket
    put(tmp_path, "/var/lib/kubelet/device-plugins/other.sock")  # not an NVIDIA plugin
    assert run(host, "operator-gpucluster") == Outcome(
        Status.FAIL,
        "the operator-gpucluster path expects the DRA plugin, but the device plugin publishes "
        f"GPUs ({DP_GPU})",
        details("operator-gpucluster", "dra", [DP_GPU]),
        f"{REMOVE_DP}, or configure allocation_path for the device-plugin path.",
        code="wrong-owner",
    )


def test_dra_plugin_on_a_device_plugin_path_fails(tmp_path):
    host = host_with(tmp_path, {DRA_SOCK: "", KUBELET_SOCK: ""})
    assert run(host, "operator-clusterpolicy") == Outcome(
        Status.FAIL,
        "the operator-clusterpolicy path expects the device plugin, but the DRA plugin is "
        f"registered ({DRA_SOCK})",
        details("operator-clusterpolicy", "device-plugin", (), [DRA_SOCK]),
        f"{REMOVE_DRA}, or configure allocation_path for a DRA path.",
        code="wrong-owner",
    )


def test_mps_capable_node_fails_the_device_plugin_path(tmp_path):
    node = {"metadata": {"labels": {"nvidia.com/mps.capable": "True"}}}
    host = host_with(tmp_path, {DP_GPU: "", KUBELET_SOCK: ""}, node)
    assert run(host, "device-plugin") == Outcome(
        Status.FAIL,
        "the Node has nvidia.com/mps.capable=true (GPUs shared through MPS), which blocks the "
        "exclusive device-plugin path",
        {**details("device-plugin", "device-plugin", [DP_GPU]),
         # the evidence checks/allocation/sharing.py found: the label, as the Node has it
         "sharing": {"found": [{"strategy": "mps", "source": "labels",
                                "detail": "nvidia.com/mps.capable=true"}],
                     "replicas": 1, "problems": []}},
        code="mps-blocks-exclusive",
    )
    # The outcome leaves the fix to the declared failure (the engine puts it in the result).
    assert ALLOCATION_OWNER.failure("mps-blocks-exclusive").fix == (
        "Remove the MPS sharing config from the device plugin for this node, or use a DRA path "
        "with MPS claims.")


def test_corrupt_checkpoint_is_unknown_naming_the_first_error(tmp_path):
    host = host_with(tmp_path, {DRA_SOCK: "", DRA_CP: "", DP_CP: "{"})
    dra_err = f"{DRA_CP}: line 1: invalid JSON (Expecting value)"
    dp_err = f"{DP_CP}: line 1: invalid JSON (Expecting property name enclosed in double quotes)"
    usage = {"current_boot_id": None, "dra": None, "device_plugin": None, "gpus_in_use": None}
    assert run(host, "dra") == Outcome(
        Status.UNKNOWN,
        f"cannot tell whether GPUs are in use: {dra_err}",
        {"checkpoint_errors": [dra_err, dp_err], **details("dra", "dra", (), [DRA_SOCK], usage)},
        code="checkpoint-unreadable",
    )
    # The outcome leaves the fix to the declared failure (the engine puts it in the result).
    assert ALLOCATION_OWNER.failure("checkpoint-unreadable").fix == (
        "Inspect or remove the corrupt checkpoint (kubelet rewrites it).")


def test_no_kubelet_socket_and_no_owner_is_input_missing(tmp_path):
    host = host_with(tmp_path, {})
    assert run(host, "dra") == Outcome(
        Status.SKIP,
        f"kubelet is not running ({KUBELET_SOCK} absent): no GPU owner can register yet",
        details("dra", "dra"), None, "input-missing",
    )


def test_kubelet_without_an_owner_passes(tmp_path):
    host = host_with(tmp_path, {KUBELET_SOCK: ""})
    assert run(host, "device-plugin") == Outcome(
        Status.PASS,
        "one owner as the device-plugin path expects (none registered yet); GPUs in use: no",
        details("device-plugin", "device-plugin"),
    )


def test_owner_without_the_kubelet_socket_still_passes(tmp_path):
    # An owner's socket is evidence enough; the kubelet socket may be missing from a bundle.
    host = host_with(tmp_path, {DP_GPU: "", DP_MIG: ""})
    assert run(host, "device-plugin") == Outcome(
        Status.PASS,
        f"one owner as the device-plugin path expects ({DP_GPU}, {DP_MIG}); GPUs in use: no",
        details("device-plugin", "device-plugin", [DP_GPU, DP_MIG]),
    )


def test_dra_owner_in_use_says_yes_and_unverified_says_unknown(tmp_path):
    host = host_with(tmp_path, {BOOT: "b1\n", DRA_REG: "", DRA_CP: '{"nodeBootID": "b1", '
                                '"preparedClaims": {"u1": {}}}'})
    dra = {"checkpoint_boot_id": "b1", "boot_id_matches": True, "claims_prepared": ["u1"],
           "claims_unverified": [], "claims_other_state": []}
    usage = {"current_boot_id": "b1", "dra": dra, "device_plugin": None, "gpus_in_use": True}
    assert run(host, "dra") == Outcome(
        Status.PASS, f"one owner as the dra path expects ({DRA_REG}); GPUs in use: yes",
        details("dra", "dra", (), [DRA_REG], usage))
    (tmp_path / BOOT.lstrip("/")).unlink()
    out = run(host, "dra")
    assert out.status == Status.PASS
    assert out.summary == f"one owner as the dra path expects ({DRA_REG}); GPUs in use: unknown"
    assert out.details["in_use"]["gpus_in_use"] is None


def test_device_plugin_sockets_joined_on_a_dra_path(tmp_path):
    host = host_with(tmp_path, {DP_GPU: "", DP_MIG: ""})
    assert run(host, "dra").summary == (
        "the dra path expects the DRA plugin, but the device plugin publishes GPUs "
        f"({DP_GPU}, {DP_MIG})")


def test_dra_sockets_joined_on_a_device_plugin_path(tmp_path):
    host = host_with(tmp_path, {DRA_REG: "", DRA_SOCK: ""})
    assert run(host, "device-plugin").summary == (
        "the device-plugin path expects the device plugin, but the DRA plugin is registered "
        f"({DRA_REG}, {DRA_SOCK})")
