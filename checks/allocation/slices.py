"""gpu-capacity on DRA paths (dra, operator-gpucluster): this node's ResourceSlices of driver
gpu.nvidia.com (the `resourceslices` fact) name each device's UUID in the attribute `uuid`
(k8s-dra-driver-gpu cmd/gpu-kubelet-plugin/deviceinfo.go, GetDevice; MIG devices also
`parentUUID`). A UUID the host does not have fails; a healthy host GPU that no device names
(itself or as a parent) fails. Counts are not compared: UUIDs are. The host's GPUs come from
checks/allocation/gpu_capacity.py (host_gpus).
"""
from typing import Any, Dict, List, Mapping, Set, Tuple

from checks.allocation.cluster import as_dict
from checks.base import HostView, Outcome, failed, input_missing, passed, unknown

DRA_DRIVER = "gpu.nvidia.com"


def _current_slices(fact: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """gpu.nvidia.com slices of this node, of each pool's newest generation only (the API
    reference, ResourcePool.generation: older generations are being replaced)."""
    node = fact.get("node")
    items = fact.get("items")
    mine: List[Tuple[str, int, Dict[str, Any]]] = []
    for s in items if isinstance(items, list) else []:
        spec = as_dict(as_dict(s).get("spec"))
        if spec.get("driver") != DRA_DRIVER or spec.get("nodeName") not in (None, node):
            continue
        pool = as_dict(spec.get("pool"))
        gen = pool.get("generation")
        mine.append((str(pool.get("name")), gen if isinstance(gen, int) else 0, spec))
    newest: Dict[str, int] = {}
    for name, gen, _ in mine:
        newest[name] = max(newest.get(name, gen), gen)
    return [spec for name, gen, spec in mine if gen == newest[name]]


def _attr(device: Mapping[str, Any], name: str) -> Any:  # DeviceAttribute {"string": ...}
    return as_dict(as_dict(device.get("attributes")).get(name)).get("string")


# A Node's slices are API data a bundle carries as it was given: 100,000 device UUIDs made a
# 4 MB summary. The summary names the first few; details keep at most MAX_LISTED of each list
# (sorted, so the same ones every run) beside the full counts.
SHOWN = 8
MAX_LISTED = 1024


def _some(items: List[str]) -> str:
    more = f" and {len(items) - SHOWN} more" if len(items) > SHOWN else ""
    return ", ".join(items[:SHOWN]) + more


def dra_capacity(host: HostView, gpus: List[Dict[str, Any]]) -> Outcome:
    """The DRA verdict: the slices' device UUIDs against the host's GPUs (``host_gpus``)."""
    fact = host.fact("resourceslices")
    if fact is None:
        return input_missing("this node's ResourceSlices are not captured (needs the Kubernetes "
                             "API)")
    if not isinstance(fact, dict) or "error" in fact:
        why = fact.get("error") if isinstance(fact, dict) else type(fact).__name__
        return unknown(f"cannot list this node's ResourceSlices: {str(why)[:200]}",
                       code="slices-unreadable")
    slices = _current_slices(fact)
    if not slices:
        return input_missing(f"no ResourceSlice of {DRA_DRIVER} for this node yet (the DRA "
                             "driver has not published): nothing to compare")
    published: Set[str] = set()
    parents: Set[str] = set()
    for spec in slices:
        devices = spec.get("devices")
        for dev in devices if isinstance(devices, list) else []:
            uuid, parent = _attr(as_dict(dev), "uuid"), _attr(as_dict(dev), "parentUUID")
            if isinstance(uuid, str):
                published.add(uuid)
            if isinstance(parent, str):
                parents.add(parent)
    known = {str(g["uuid"]) for g in gpus if g["uuid"]}
    unverifiable = {str(g["uuid"]) for g in gpus if g["mig_enabled"] and g["mig_uuids"] is None}
    for g in gpus:
        known.update(g["mig_uuids"] or [])
    # A MIG device of a GPU whose MIG devices the snapshot does not list cannot be checked.
    stray = sorted(u for u in published - known if not (u.startswith("MIG-") and unverifiable))
    details: Dict[str, Any] = {"slices": len(slices),
                               "published_uuids": sorted(published)[:MAX_LISTED],
                               "host_uuids": sorted(known)[:MAX_LISTED],
                               "published_count": len(published), "host_count": len(known)}
    if stray:
        return failed(f"ResourceSlice device UUID(s) the host does not have: {_some(stray)}",
                      code="slice-device-unknown", **details)
    missing = sorted(str(g["uuid"]) for g in gpus if g["healthy"] and g["uuid"]
                     and g["uuid"] not in published and g["uuid"] not in parents
                     and not set(g["mig_uuids"] or []) & published)
    if missing:
        return failed(f"healthy GPU(s) in no ResourceSlice of {DRA_DRIVER}: {_some(missing)}",
                      code="slice-device-missing", **details)
    return passed(f"{len(published)} device(s) in {len(slices)} ResourceSlice(s) match the host's "
                  f"GPUs by UUID", **details)
