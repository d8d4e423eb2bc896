"""gpu-capacity: what the kubelet advertises agrees with the host, after MIG and sharing.

Device-plugin paths (device-plugin, operator-clusterpolicy): the Node's status.allocatable
`nvidia.com/gpu` (plus `nvidia.com/gpu.shared` and the `nvidia.com/mig-*` resources of MIG
`mixed`) lies between the healthy units and all units, each times the sharing replicas. A unit
is a GPU, or under a MIG strategy each MIG device of a MIG-enabled GPU. The plugin rightly
drops a GPU it marked unhealthy (k8s-device-plugin internal/plugin/server.go ListAndWatch
sends the device as Unhealthy and the kubelet stops counting it; internal/rm/health.go marks a
GPU unhealthy on any critical XID except the application errors 13, 31, 43, 45, 68), so fewer
than all is fine, fewer than the healthy is not.

Healthy (docs/decisions.md, "gpu-capacity: a healthy GPU"): NVML answers for it (no
gpus[i].error in the snapshot) and it has no sticky fault the agent recorded this boot that
no reset or `gpu-node-agent clear` covers (agent/xid/state.py; the faults gpu-xid and gpu-ecc
fail on).

DRA paths (dra, operator-gpucluster): this node's ResourceSlices of driver gpu.nvidia.com
(`resourceslices` fact) name each device's UUID in the attribute `uuid` (k8s-dra-driver-gpu
cmd/gpu-kubelet-plugin/deviceinfo.go, GetDevice; MIG devices also `parentUUID`). A UUID the
host does not have fails; a healthy host GPU that no device names (itself or as a parent)
fails. Counts are not compared: UUIDs are.

Before the node joins and before the owner advertised anything it is `skip` (nothing to compare).
"""
from typing import Any, Dict, List, Mapping, Optional, Tuple

from agent.model import DRA_PATHS
from agent.xid.state import cleared
from checks.allocation.cluster import as_dict, node_unavailable_reason
from checks.allocation.sharing import (
    GPU_RESOURCE,
    MIG_RESOURCE_PREFIX,
    SHARED_SUFFIX,
    evidence,
    nvidia_allocatable,
)
from checks.allocation.slices import dra_capacity
from checks.base import (
    ALL_PATHS,
    Check,
    Failure,
    HostView,
    Interval,
    Outcome,
    Severity,
    Status,
    failed,
    input_missing,
    passed,
)
from checks.gpu.common import gpu_check, setting
from checks.policy import ResolvedPolicy
from checks.xid.eval import state_for_boot

PLUGIN_SOURCE = ("NVIDIA k8s-device-plugin internal/plugin/server.go (ListAndWatch: unhealthy "
                 "devices), internal/rm/health.go (XIDs 13, 31, 43, 45, 68 ignored); Kubernetes "
                 "device plugin API (allocatable counts healthy devices)")
SLICE_SOURCE = ("NVIDIA k8s-dra-driver-gpu cmd/gpu-kubelet-plugin/deviceinfo.go (attributes "
                "uuid, parentUUID); Kubernetes API resource.k8s.io/v1 ResourceSlice")


def host_gpus(host: HostView, snap: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """Per snapshot GPU: index, uuid, MIG device UUIDs (None when not listed), healthy and why
    not."""
    state = state_for_boot(host.fact("sticky"), host.boot_id())
    # The state file is input: entries that are not objects are left out before matching.
    state = {"faults": [f for f in state["faults"] if isinstance(f, dict)],
             "clears": [c for c in state["clears"] if isinstance(c, dict)]}
    faulty: Dict[str, str] = {}
    for fault in state["faults"]:
        gpu = as_dict(fault.get("gpu"))
        try:
            if cleared(state, gpu, str(fault.get("class", "reset-gpu")),
                       fault.get("last_mono_us"), fault.get("last_at")):
                continue
        except (TypeError, ValueError):
            pass  # a clear or a time of the wrong type clears nothing
        why = str(fault.get("message") or f"sticky {fault.get('kind', 'fault')}")[:120]
        for key in (gpu.get("uuid"), gpu.get("index")):
            if key is not None:
                faulty.setdefault(str(key), why)
    out = []
    for gpu in snap.get("gpus") or []:
        gpu = as_dict(gpu)
        mig = as_dict(gpu.get("mig"))
        devices = mig.get("devices") if mig.get("current") == "enabled" else []
        reason: Optional[str] = (
            "lost: NVML does not answer for it" if gpu.get("error") else
            faulty.get(str(gpu.get("uuid"))) or faulty.get(str(gpu.get("index"))))
        out.append({
            "index": gpu.get("index"), "uuid": gpu.get("uuid"),
            "mig_enabled": mig.get("current") == "enabled",
            "mig_uuids": ([str(as_dict(d).get("uuid")) for d in devices]
                          if isinstance(devices, list) else None),
            "healthy": reason is None, "unhealthy_because": reason,
        })
    return out


def _units(gpus: List[Dict[str, Any]], mig_strategy: str) -> Tuple[int, int, bool]:
    """(all units, healthy units, whether the MIG devices of a MIG GPU are unknown)."""
    total = healthy = 0
    for g in gpus:
        if mig_strategy != "none" and g["mig_enabled"]:
            if g["mig_uuids"] is None:
                return 0, 0, True
            n = len(g["mig_uuids"])
        else:
            n = 1
        total += n
        healthy += n if g["healthy"] else 0
    return total, healthy, False


def _device_plugin(host: HostView, policy: ResolvedPolicy, gpus: List[Dict[str, Any]],
                   node: Any) -> Outcome:
    alloc = nvidia_allocatable(node) or {}
    full = (GPU_RESOURCE, GPU_RESOURCE + SHARED_SUFFIX)
    advertised = {k: v for k, v in alloc.items() if k in full or k.startswith(MIG_RESOURCE_PREFIX)}
    if not advertised:
        return input_missing(f"the Node advertises no {GPU_RESOURCE} yet (the device plugin has "
                             "not registered): nothing to compare")
    strategy = str(setting(policy, "gpu", "mig_strategy", "none"))
    total, healthy, mig_unknown = _units(gpus, strategy)
    if mig_unknown:
        return input_missing("a MIG-enabled GPU's MIG devices are not in the GPU snapshot: the "
                             "units the plugin may advertise are not known")
    files = setting(policy, "gpu", "device_plugin_config_files", [])
    replicas = evidence(host, node, files if isinstance(files, list) else [])["replicas"]
    count = sum(advertised.values())
    shown = ", ".join(f"{k} {v}" for k, v in sorted(advertised.items()))
    mig = strategy != "none" and any(g["mig_enabled"] for g in gpus)
    unit = "MIG device(s)" if mig else "GPU(s)"
    times = f" x {replicas} replicas" if replicas > 1 else ""
    sick = [f"GPU {g['index']} ({g['unhealthy_because']})" for g in gpus if not g["healthy"]]
    details: Dict[str, Any] = {"allocatable": advertised, "units": total, "healthy_units": healthy,
               "replicas": replicas, "unhealthy": sick, "mig_strategy": strategy}
    if count > total * replicas:
        configured = "" if replicas > 1 else " and no sharing configured"
        return failed(f"allocatable {shown} is above the host's {total} {unit}{times}"
                      f"{configured}", code="allocatable-above-host", **details)
    if count < healthy * replicas:
        return failed(f"allocatable {shown} is below the host's {healthy} healthy of {total} "
                      f"{unit}{times}: the kubelet offers fewer than the host has",
                      code="allocatable-below-healthy", **details)
    extra = f"; unhealthy: {', '.join(sick)}" if sick else ""
    return passed(f"allocatable {shown} within {healthy * replicas}..{total * replicas} "
                  f"({total} {unit}, {healthy} healthy{times}){extra}", **details)


def _judge(host: HostView, policy: ResolvedPolicy, snap: Any) -> Outcome:
    gpus = host_gpus(host, snap)
    if policy.path in DRA_PATHS:
        return dra_capacity(host, gpus)
    return _device_plugin(host, policy, gpus, host.fact("node"))


def _run(host: HostView, policy: ResolvedPolicy) -> Outcome:
    node = host.fact("node")
    why = node_unavailable_reason(node)
    if why is not None:
        return input_missing(f"before the node joins: {why}")
    if not isinstance(node, dict):
        return input_missing(f"the node fact is not a Node object ({type(node).__name__})")
    return gpu_check(_judge)(host, policy)


GPU_CAPACITY = Check(
    id="gpu-capacity",
    title="The kubelet advertises the host's GPUs (allocatable or ResourceSlices)",
    severity=Severity.CRITICAL,
    gates=ALL_PATHS,
    interval=Interval.SLOW,
    remediation=(
        "Make the GPU owner advertise what the host has: restart the device plugin or the DRA "
        "driver's kubelet plugin on this node after a GPU, MIG or sharing change."
    ),
    run=_run,
    facts=("node", "resourceslices", "sticky"),
    uses_gpus=True,
    timeout_s=10.0,
    since_policy=2,
    failures=(
        Failure(
            "allocatable-above-host", Status.FAIL,
            "the Node's allocatable nvidia.com/gpu (with .shared and mig-*) is above the host's "
            "GPUs (or MIG devices) times the sharing replicas configured",
            "Find who advertises the extra devices: a time-slicing or MPS config the node's "
            "labels do not show (configure it openly, or remove it), or a second device plugin; "
            "restart the device plugin.",
            PLUGIN_SOURCE,
        ),
        Failure(
            "allocatable-below-healthy", Status.FAIL,
            "the Node's allocatable nvidia.com/gpu is below the number of healthy GPUs (or MIG "
            "devices) the host has",
            "Restart the device plugin on this node (it keeps a GPU it once marked unhealthy "
            "out until it restarts); check its log for the device it dropped.",
            PLUGIN_SOURCE,
        ),
        Failure(
            "slice-device-unknown", Status.FAIL,
            "a ResourceSlice of gpu.nvidia.com for this node names a device UUID the host does "
            "not have",
            "Restart the DRA driver's kubelet plugin on this node so it republishes its "
            "ResourceSlices (a stale slice after a GPU swap or a MIG change).",
            SLICE_SOURCE,
        ),
        Failure(
            "slice-device-missing", Status.FAIL,
            "a healthy GPU of the host is in no ResourceSlice of gpu.nvidia.com for this node",
            "Restart the DRA driver's kubelet plugin on this node; check its log for the GPU it "
            "left out.",
            SLICE_SOURCE,
        ),
        Failure(
            "slices-unreadable", Status.UNKNOWN,
            "this node's ResourceSlices could not be listed (API error, RBAC, or an answer "
            "that is not a ResourceSliceList)",
            "Let the node identity list ResourceSlices with fieldSelector=spec.nodeName=<node> "
            "(the Node authorizer allows exactly that from Kubernetes 1.34 with "
            "AuthorizeNodeWithSelectors) or grant list on resourceslices to the agent's "
            "credentials (docs/kubernetes.md).",
            "kubernetes plugin/pkg/auth/authorizer/node/node_authorizer.go "
            "(authorizeResourceSlice)",
        ),
    ),
)
