"""The cluster part of allocation-owner, for checks/allocation/allocation_owner.py to call.

`nvidia.com/mps.capable=true` is the label NVIDIA's device plugin (and GPU Feature Discovery)
puts on a node whose GPUs are shared through MPS (k8s-device-plugin README, "With CUDA MPS");
such a node cannot also offer its GPUs exclusively through the device-plugin path. The Node
comes from the `node` host fact (agent/kube/facts.py): the Node object, or {"error": ...}
when the API is not reachable, or None when not captured.
"""

from typing import Any, Dict, Optional

MPS_LABEL = "nvidia.com/mps.capable"
EXCLUSIVE_PATHS = ("device-plugin",)
MPS_SOURCE = 'NVIDIA k8s-device-plugin README, "With CUDA MPS" (nvidia.com/mps.capable)'


def as_dict(value: Any) -> Dict[str, Any]:
    """`value` when it is a JSON object, else {}: bundle and API documents are hostile input, so
    a field that should hold an object may hold any JSON (or be missing) and then reads as empty.
    The one copy for checks/allocation (allocation_owner, gpu_capacity, slices)."""
    return value if isinstance(value, dict) else {}


def node_labels(node: Any) -> Optional[Dict[str, str]]:
    """The Node's labels; None when the Node is not available (API unreachable/not captured)."""
    if not isinstance(node, dict) or "error" in node:
        return None
    metadata = node.get("metadata")  # a bundle's Node is hostile: any JSON in any field
    labels = (metadata.get("labels") if isinstance(metadata, dict) else None) or {}
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}


def node_unavailable_reason(node: Any) -> Optional[str]:
    """Why the Node cannot be read (for a `skip` summary); None when it can."""
    if node is None:
        return "the Node is not captured for this host (needs the Kubernetes API)"
    if isinstance(node, dict) and "error" in node:
        return f"Kubernetes API not reachable: {str(node['error'])[:200]}"
    return None


def mps_conflict(node: Any, path: str) -> Optional[str]:
    """A one-line problem when MPS sharing blocks the exclusive device-plugin path, else None
    (also None when the Node is unavailable: ask node_unavailable_reason for that)."""
    if path not in EXCLUSIVE_PATHS:
        return None
    labels = node_labels(node)
    if labels is None:
        return None
    if labels.get(MPS_LABEL, "").lower() == "true":
        return (
            f"the Node has {MPS_LABEL}=true (GPUs shared through MPS), which blocks the "
            f"exclusive {path} path"
        )
    return None
