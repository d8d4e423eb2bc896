"""allocation-owner (host evidence): exactly one owner publishes the GPUs to the kubelet, and
it is the one the configured allocation path expects. Its details also say whether GPUs are
in use through that owner, for the label guard (docs/kubernetes.md).

Host layout: device plugins serve /var/lib/kubelet/device-plugins/nvidia-*.sock;
the DRA plugin registers plugins_registry/gpu.nvidia.com-reg.sock and serves
plugins/gpu.nvidia.com/dra.sock.
"""

from typing import Any, Dict, List, Optional, Tuple

from agent.safeio import jsonio
from checks.allocation.cluster import (
    EXCLUSIVE_PATHS,
    MPS_SOURCE,
    as_dict,
    mps_conflict,
)
from checks.allocation.policy import SharingPolicy
from checks.allocation.sharing import SOURCES as SHARING_SOURCES
from checks.allocation.sharing import evidence
from checks.base import (
    ALL_PATHS,
    DRA_PATHS,
    Check,
    Failure,
    HostView,
    Interval,
    Outcome,
    Severity,
    Status,
    failed,
    passed,
    skipped,
    unknown,
)
from checks.policy import ResolvedPolicy

DP_GLOB = "/var/lib/kubelet/device-plugins/nvidia-*.sock"
# kubelet serves its device-plugin Registration service here while it runs (device plugin
# API, k8s.io/kubelet/pkg/apis/deviceplugin: KubeletSocket); without it no owner can register.
KUBELET_SOCKET = "/var/lib/kubelet/device-plugins/kubelet.sock"
DRA_SOCKETS = (
    "/var/lib/kubelet/plugins_registry/gpu.nvidia.com-reg.sock",
    "/var/lib/kubelet/plugins/gpu.nvidia.com/dra.sock",
)
DRA_CHECKPOINT = "/var/lib/kubelet/plugins/gpu.nvidia.com/checkpoint.json"
DP_CHECKPOINT = "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
PREPARE_COMPLETED = "PrepareCompleted"  # k8s-dra-driver-gpu ClaimCheckpointStatePrepareCompleted
PLUGIN_APIS = ("Kubernetes device plugin API (k8s.io/kubelet/pkg/apis/deviceplugin) and DRA "
               "kubelet plugin registration (plugins_registry); NVIDIA k8s-device-plugin and "
               "k8s-dra-driver-gpu socket names")
CHECKPOINTS = ("kubelet pkg/kubelet/cm/devicemanager/checkpoint (PodDeviceEntries); "
               "k8s-dra-driver-gpu checkpoint.json (preparedClaims, checkpointState)")


def _load_json(host: HostView, path: str) -> Tuple[Optional[Any], Optional[str]]:
    text = host.read_text_or_none(path)
    if text is None:
        return None, None
    try:
        return jsonio.loads(text), None  # bounded: depth, integer length
    except jsonio.JsonError as exc:
        return None, f"{path}: {exc}"


def dra_claims(data: Any, boot_id: Optional[str]) -> Dict[str, Any]:
    """Prepared claims in the DRA plugin's checkpoint. The plugin's checkpoint has a v1
    layout (claims without a state count as completed, per its ToV2 conversion) and a v2
    layout with a checkpointState per claim; claims count only under the current boot."""
    root = as_dict(data)
    cp_boot = root.get("nodeBootID")
    claims: Dict[str, Any] = {}
    for section in (root, as_dict(root.get("v1")), as_dict(root.get("v2"))):
        cp_boot = cp_boot or section.get("nodeBootID")
        for uid, claim in as_dict(section.get("preparedClaims")).items():
            state = as_dict(claim).get("checkpointState") or PREPARE_COMPLETED
            claims[str(uid)] = state
    completed = sorted(uid for uid, state in claims.items() if state == PREPARE_COMPLETED)
    matches = None if not (cp_boot and boot_id) else cp_boot == boot_id
    return {
        "checkpoint_boot_id": cp_boot,
        "boot_id_matches": matches,
        "claims_prepared": completed if matches else [],
        "claims_unverified": completed if matches is None else [],
        "claims_other_state": sorted(uid for uid, s in claims.items() if s != PREPARE_COMPLETED),
    }


def dp_pods(data: Any) -> Dict[str, Any]:
    """Pods holding nvidia.com/* devices in kubelet's device-manager checkpoint
    (pkg/kubelet/cm/devicemanager/checkpoint: Data.PodDeviceEntries)."""
    entries = as_dict(as_dict(data).get("Data")).get("PodDeviceEntries")
    pods, resources = set(), set()
    for entry in entries if isinstance(entries, list) else []:
        name = as_dict(entry).get("ResourceName")
        if isinstance(name, str) and name.startswith("nvidia.com/") and entry.get("PodUID"):
            pods.add(str(entry["PodUID"]))
            resources.add(name)
    return {"pods": sorted(pods), "resources": sorted(resources)}


def in_use(host: HostView) -> Tuple[Dict[str, Any], List[str]]:
    boot_id = host.boot_id()
    errors: List[str] = []
    facts: Dict[str, Any] = {"current_boot_id": boot_id}
    dra, err = _load_json(host, DRA_CHECKPOINT)
    facts["dra"] = dra_claims(dra, boot_id) if dra is not None else None
    dp, err2 = _load_json(host, DP_CHECKPOINT)
    facts["device_plugin"] = dp_pods(dp) if dp is not None else None
    errors += [e for e in (err, err2) if e]
    used = bool(facts["dra"] and facts["dra"]["claims_prepared"]) or bool(
        facts["device_plugin"] and facts["device_plugin"]["pods"]
    )
    unsure = bool(errors) or bool(facts["dra"] and facts["dra"]["claims_unverified"])
    # The label guard must treat None as "in use": it cannot prove the GPUs are idle.
    facts["gpus_in_use"] = True if used else (None if unsure else False)
    return facts, errors


def _run(host: HostView, policy: ResolvedPolicy) -> Outcome:
    want = "dra" if policy.path in DRA_PATHS else "device-plugin"
    dp = [p for p in sorted(host.glob(DP_GLOB)) if host.is_socket(p)]
    dra = [p for p in DRA_SOCKETS if host.is_socket(p)]
    usage, errors = in_use(host)
    details: Dict[str, Any] = {
        "path": policy.path,
        "expected_owner": want,
        "device_plugin_sockets": dp,
        "dra_sockets": dra,
        "in_use": usage,
    }
    remove_dp = (
        "Remove the NVIDIA device plugin from this node (its DaemonSet's nodeSelector/affinity, "
        "or devicePlugin.enabled=false in the GPU Operator's ClusterPolicy)"
    )
    remove_dra = (
        "Remove the NVIDIA DRA driver's kubelet plugin from this node (its Helm release's "
        "nodeSelector, or the GPU Operator's DRA setting)"
    )
    if dp and dra:
        fix = remove_dra if want == "device-plugin" else remove_dp
        return failed(
            f"both the device plugin ({', '.join(dp)}) and the DRA plugin ({', '.join(dra)}) "
            "publish GPUs on this node",
            f"{fix}: two owners hand out the same GPUs twice. Drain GPU pods first.",
            code="two-owners",
            **details,
        )
    if want == "dra" and dp:
        return failed(
            f"the {policy.path} path expects the DRA plugin, but the device plugin publishes "
            f"GPUs ({', '.join(dp)})",
            f"{remove_dp}, or configure allocation_path for the device-plugin path.",
            code="wrong-owner",
            **details,
        )
    if want == "device-plugin" and dra:
        return failed(
            f"the {policy.path} path expects the device plugin, but the DRA plugin is "
            f"registered ({', '.join(dra)})",
            f"{remove_dra}, or configure allocation_path for a DRA path.",
            code="wrong-owner",
            **details,
        )
    # Sharing (checks/allocation/sharing.py): the host's sockets and plugin config, the Node's
    # labels and allocatable; the `sharing` policy says which strategies this path allows
    # (checks/allocation/policy.py). A Node that cannot be read leaves the host evidence.
    node = host.fact("node")
    shared = evidence(host, node, _config_files(policy))
    if shared["found"] or shared["problems"]:
        details["sharing"] = shared
    allowed = sharing_policy(policy)
    refused = [f for f in shared["found"] if not allowed.allows(policy.path, f["strategy"])]
    if refused:
        seen = "; ".join(dict.fromkeys(f["detail"] for f in refused))
        kind = " and ".join(sorted({f["strategy"] for f in refused}))
        exclusive = policy.path in EXCLUSIVE_PATHS
        where = f"the exclusive {policy.path} path" if exclusive else f"the {policy.path} path"
        code = "mps-blocks-exclusive" if kind == "mps" and exclusive else "sharing-not-allowed"
        label_only = mps_conflict(node, policy.path) if code == "mps-blocks-exclusive" else None
        summary = label_only if label_only and len(refused) == 1 else (
            f"GPUs shared by {kind} ({seen}), which {where} does not allow")
        return failed(summary, code=code, **details)
    if errors:
        return unknown(
            f"cannot tell whether GPUs are in use: {errors[0]}",
            code="checkpoint-unreadable",
            checkpoint_errors=errors,
            **details,
        )
    if not (dp or dra) and not host.is_socket(KUBELET_SOCKET):
        return skipped(
            f"kubelet is not running ({KUBELET_SOCKET} absent): no GPU owner can register yet",
            kind="input-missing",
            **details,
        )
    owner = ", ".join(dp or dra) or "none registered yet"
    used = {True: "yes", False: "no", None: "unknown"}[usage["gpus_in_use"]]
    kinds = sorted({f["strategy"] for f in shared["found"]})
    note = f"; sharing: {' and '.join(kinds)} (allowed on this path)" if kinds else ""
    return passed(
        f"one owner as the {policy.path} path expects ({owner}); GPUs in use: {used}{note}",
        **details,
    )


def sharing_policy(policy: ResolvedPolicy) -> SharingPolicy:
    """The `sharing` policy section (checks/allocation/policy.py); defaults without it."""
    found = getattr(getattr(policy, "policy", None), "sharing", None)
    return found if isinstance(found, SharingPolicy) else SharingPolicy()


def _config_files(policy: ResolvedPolicy) -> List[str]:
    """config gpu.device_plugin_config_files: where a standalone device plugin's config is."""
    gpu = policy.setting("gpu") if hasattr(policy, "setting") else None
    files = gpu.get("device_plugin_config_files") if isinstance(gpu, dict) else None
    return [str(f) for f in files] if isinstance(files, list) else []


ALLOCATION_OWNER = Check(
    id="allocation-owner",
    title="Exactly one GPU allocation owner, the one the path expects",
    severity=Severity.CRITICAL,
    gates=ALL_PATHS,
    interval=Interval.FAST,
    remediation=(
        "Run exactly one of the NVIDIA device plugin and the NVIDIA DRA driver on a node, the "
        "one that matches allocation_path."
    ),
    run=_run,
    reads=(DRA_CHECKPOINT, DP_CHECKPOINT),
    presence=(DP_GLOB, KUBELET_SOCKET) + DRA_SOCKETS,
    facts=("node",),
    # The GPU count, for an allocatable above it (time-slicing replicas).
    uses_gpus=True,
    timeout_s=10.0,
    failures=(
        Failure(
            "two-owners", Status.FAIL,
            "both the NVIDIA device plugin and the NVIDIA DRA plugin publish GPUs on this node",
            "Remove the owner the allocation path does not use from this node (the device "
            "plugin's DaemonSet nodeSelector or devicePlugin.enabled=false in the ClusterPolicy; "
            "the DRA driver's Helm release nodeSelector): two owners hand out the same GPUs "
            "twice. Drain GPU pods first.",
            PLUGIN_APIS,
        ),
        Failure(
            "wrong-owner", Status.FAIL,
            "the GPUs are published by the owner the allocation path does not expect",
            "Remove that owner from this node, or configure allocation_path for the path it "
            "serves.",
            PLUGIN_APIS,
        ),
        Failure(
            "mps-blocks-exclusive", Status.FAIL,
            "the GPUs are shared through MPS (the Node's nvidia.com/mps.capable or "
            "sharing-strategy label, or the plugin's config), which blocks the exclusive "
            "device-plugin path",
            "Remove the MPS sharing config from the device plugin for this node, or use a DRA "
            "path with MPS claims.",
            MPS_SOURCE,
        ),
        Failure(
            "sharing-not-allowed", Status.FAIL,
            "the GPUs are shared (time-slicing: a renamed .shared plugin socket, the "
            "nvidia.com/gpu.replicas or sharing-strategy label, allocatable above the GPU "
            "count, or the plugin's config) and the path's sharing policy does not allow it",
            "Remove the sharing config (sharing.timeSlicing / sharing.mps) from the device "
            "plugin's config for this node (the GPU Operator's devicePlugin.config, or the "
            "nvidia.com/device-plugin.config label), or allow the strategy for this path in "
            "the policy's `sharing.allowed`.",
            SHARING_SOURCES,
        ),
        Failure(
            "checkpoint-unreadable", Status.UNKNOWN,
            "a kubelet or DRA plugin checkpoint does not parse: whether GPUs are in use is not "
            "known",
            "Inspect or remove the corrupt checkpoint (kubelet rewrites it).",
            CHECKPOINTS,
        ),
    ),
)
