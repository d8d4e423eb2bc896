"""GPU sharing evidence for allocation-owner and gpu-capacity: whether this node's GPUs are
shared by time-slicing or CUDA MPS, from the host and from the Node.

Host:
- NVIDIA's device plugin serves one socket per resource, named "nvidia-" + the resource name
  without its "nvidia.com/" prefix + ".sock" (k8s-device-plugin internal/plugin/server.go,
  NewNvidiaDevicePlugin: pluginapi.DevicePluginPath + "nvidia-" + name + ".sock"); a shared
  resource renamed by `renameByDefault` or `rename` (README, "Shared Access to GPUs") is
  `nvidia.com/gpu.shared`, served on nvidia-gpu.shared.sock.
- The plugin's config file, where a standalone install keeps it on disk (config
  `gpu.device_plugin_config_files`, default none): `sharing.timeSlicing.resources[]` and
  `sharing.mps.resources[]`, each with `name` and `replicas` (k8s-device-plugin
  api/config/v1 sharing.go, ReplicatedResource).
Node (GPU Feature Discovery labels, k8s-device-plugin internal/lm/resource.go baseLabeler):
`nvidia.com/gpu.replicas` (above 1 when shared) and `nvidia.com/gpu.sharing-strategy` (none,
time-slicing, mps), the same per MIG resource (`nvidia.com/mig-<profile>.replicas`), and
`nvidia.com/mps.capable` (README, "With CUDA MPS"); and status.allocatable `nvidia.com/gpu`
above the GPUs NVML reports (each replica is one allocatable unit).
"""
import re
from typing import Any, Dict, List, Mapping, Optional, Tuple

from agent.safeio.yamlio import YamlError, safe_load
from checks.allocation.cluster import node_labels
from checks.base import HostView

DP_GLOB = "/var/lib/kubelet/device-plugins/nvidia-*.sock"
DP_DIR = "/var/lib/kubelet/device-plugins/"
RESOURCE_PREFIX = "nvidia.com/"
SHARED_SUFFIX = ".shared"
REPLICAS_LABEL = "nvidia.com/gpu.replicas"
STRATEGY_LABEL = "nvidia.com/gpu.sharing-strategy"
MPS_LABEL = "nvidia.com/mps.capable"
GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
SOURCES = ("NVIDIA k8s-device-plugin internal/plugin/server.go (socket nvidia-<resource>.sock), "
           "README \"Shared Access to GPUs\" (sharing.timeSlicing, sharing.mps, renameByDefault "
           "-> <resource>.shared), internal/lm/resource.go baseLabeler (nvidia.com/gpu.replicas, "
           "nvidia.com/gpu.sharing-strategy)")
_COUNT = re.compile(r"^[0-9]{1,6}$")


def count(value: Any) -> Optional[int]:
    """An allocatable device count ("8"); None for anything else (devices are whole units)."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10**6:
        return value
    if isinstance(value, str) and _COUNT.match(value):
        return int(value)
    return None


def nvidia_allocatable(node: Any) -> Optional[Dict[str, int]]:
    """status.allocatable's nvidia.com/* device counts; None when the Node is unavailable."""
    if not isinstance(node, dict) or "error" in node:
        return None
    status = node.get("status")
    alloc = status.get("allocatable") if isinstance(status, dict) else None
    out: Dict[str, int] = {}
    for key, value in (alloc.items() if isinstance(alloc, dict) else ()):
        n = count(value)
        if isinstance(key, str) and key.startswith(RESOURCE_PREFIX) and n is not None:
            out[key] = n
    return out


def config_replicas(host: HostView, paths: List[str]) -> Tuple[List[Dict[str, Any]], List[str]]:
    """(the replicated resources the plugin's config files name, problems reading them)."""
    found: List[Dict[str, Any]] = []
    problems: List[str] = []
    for path in paths:
        text = host.read_text_or_none(path)
        if text is None:
            continue
        try:
            data = safe_load(text)
        except YamlError as exc:
            problems.append(f"{path}: {exc}")
            continue
        sharing = data.get("sharing") if isinstance(data, dict) else None
        for key, strategy in (("timeSlicing", "time-slicing"), ("mps", "mps")):
            section = sharing.get(key) if isinstance(sharing, dict) else None
            resources = section.get("resources") if isinstance(section, dict) else None
            for res in resources if isinstance(resources, list) else []:
                replicas = count(res.get("replicas")) if isinstance(res, dict) else None
                if replicas is not None and replicas > 1:
                    found.append({"file": path, "strategy": strategy,
                                  "resource": str(res.get("name")), "replicas": replicas})
    return found, problems


def gpu_units(snap: Any) -> Optional[int]:
    """How many allocatable units the host has without sharing: a GPU, or each MIG device of
    a MIG-enabled GPU when the snapshot lists them; None when a MIG-enabled GPU's devices are
    not in the snapshot (the count cannot be known)."""
    gpus = snap.get("gpus") if isinstance(snap, Mapping) else None
    if not isinstance(gpus, list):
        return None
    total = 0
    for gpu in gpus:
        mig = gpu.get("mig") if isinstance(gpu, Mapping) else None
        if isinstance(mig, Mapping) and mig.get("current") == "enabled":
            devices = mig.get("devices")
            if not isinstance(devices, list):
                return None
            total += len(devices)
        else:
            total += 1
    return total


def evidence(host: HostView, node: Any, config_files: List[str]) -> Dict[str, Any]:
    """Every sign of sharing on this node: {"found": [{"strategy", "source", "detail"}],
    "replicas": the replica count configured (1 = none), "problems": [...]}."""
    found: List[Dict[str, str]] = []
    sockets = [p for p in sorted(host.glob(DP_GLOB)) if host.is_socket(p)]
    for path in sockets:
        name = path[len(DP_DIR) + len("nvidia-"):-len(".sock")]
        if name.endswith(SHARED_SUFFIX):
            found.append({"strategy": "time-slicing", "source": "socket",
                          "detail": f"{path} serves {RESOURCE_PREFIX}{name} (a renamed shared "
                                    "resource)"})
    replicas = 1
    labels = node_labels(node) or {}
    mps_label = labels.get(MPS_LABEL, "").lower() == "true"
    # GFD writes <resource>.replicas and <resource>.sharing-strategy for nvidia.com/gpu and
    # each MIG resource of the mixed strategy (internal/lm/resource.go baseLabeler; strategy
    # "none" unless replicas > 1).
    for key in sorted(k for k in labels if _sharing_label(k)):
        value = labels[key]
        if key.endswith(".sharing-strategy") and value.lower() in ("time-slicing", "mps"):
            found.append({"strategy": value.lower(), "source": "labels",
                          "detail": f"{key}={value.lower()}"})
        n = count(value) if key.endswith(".replicas") else None
        if n is not None and n > 1:
            replicas = max(replicas, n)
            named = labels.get(key[:-len("replicas")] + "sharing-strategy", "").lower()
            strategy = named if named in ("time-slicing", "mps") else (
                "mps" if mps_label else "time-slicing")
            found.append({"strategy": strategy, "source": "labels", "detail": f"{key}={n}"})
    if mps_label:
        found.append({"strategy": "mps", "source": "labels", "detail": f"{MPS_LABEL}=true"})
    configured, problems = config_replicas(host, config_files)
    for res in configured:
        replicas = max(replicas, res["replicas"])
        found.append({"strategy": res["strategy"], "source": "config",
                      "detail": f"{res['file']}: {res['strategy']} {res['resource']} "
                                f"replicas {res['replicas']}"})
    alloc = nvidia_allocatable(node) or {}
    units = gpu_units(host.gpus())
    advertised = alloc.get(GPU_RESOURCE, 0) + alloc.get(GPU_RESOURCE + SHARED_SUFFIX, 0)
    if units and advertised > units:
        found.append({"strategy": "time-slicing", "source": "allocatable",
                      "detail": f"allocatable {GPU_RESOURCE} {advertised} on {units} GPU(s)"})
    # A strategy named by a label or the config decides what the other signs are.
    said = {f["strategy"] for f in found if f["source"] in ("labels", "config")}
    if said == {"mps"}:
        for f in found:
            f["strategy"] = "mps"
    return {"found": found, "replicas": replicas, "problems": problems}


def _sharing_label(key: str) -> bool:
    """nvidia.com/gpu.replicas, nvidia.com/mig-1g.10gb.sharing-strategy and the like."""
    if not key.endswith((".replicas", ".sharing-strategy")):
        return False
    return key.startswith((GPU_RESOURCE + ".", MIG_RESOURCE_PREFIX))
