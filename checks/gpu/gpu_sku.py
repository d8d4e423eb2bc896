"""gpu-sku: the host carries the GPUs the site ordered, with the firmware and limits it pinned
(policy version 2; policy ``gpu.sku.products``, model checks/gpu/policy.py SkuPolicy).

A GPU's product is its PCI device id looked up in checks/gpu/sku_table.py (pci.ids names),
never nvmlDeviceGetName's text. The host's product is the pinned product most of its GPUs are;
a GPU of another product is `sku-mixed`; a host none of whose GPUs is a pinned product is
`sku-product-not-pinned`. The GPUs of the host's product are then held to that product's
entry: framebuffer MiB as NVML reports it (total_bytes / 2**20, never GB), VBIOS and InfoROM
image allow-lists, the number of NVLinks NVML reports, the enforced power limit and the
applications clocks. Every finding names the GPU index, bus id, product, field, want and
have (also in details.mismatches). No product pinned: not applicable.
"""
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from agent.snapshot import GpuSnapshot
from checks.base import (
    ALL_PATHS,
    Check,
    Failure,
    HostView,
    Interval,
    Outcome,
    Severity,
    Status,
    not_applicable,
)
from checks.gpu.common import (
    FIELD_UNREADABLE,
    NVML_REQUIRES,
    SNAPSHOT_MALFORMED,
    Findings,
    each_field,
    gpu_check,
    gpu_label,
    gpu_policy,
    snapshot_failures,
)
from checks.gpu.policy import Bounds, SkuProduct
from checks.gpu.readers import SnapshotError, opt_int, opt_str, text
from checks.gpu.sku_table import PCI_IDS, describe, product_of
from checks.policy import ResolvedPolicy

MIXED = "sku-mixed"
NOT_PINNED = "sku-product-not-pinned"
MEMORY_BELOW = "sku-memory-below"
VBIOS = "sku-vbios-not-allowed"
INFOROM = "sku-inforom-not-allowed"
NVLINK = "sku-nvlink-count"
POWER = "sku-power-limit"
CLOCKS = "sku-clocks"
MIB = 1 << 20

SMI = ("`nvidia-smi -q` (Product Name, PCI Device Id, FB Memory Usage, VBIOS Version, "
       "Inforom Version)")
SOURCE_IDENTITY = f"nvml.h nvmlPciInfo_t.pciDeviceId; {PCI_IDS}"
RETURN = ("Return or re-seat the host with the vendor: the GPUs are not the ordered product "
          "(compare `nvidia-smi -q` Product Name and PCI Device Id per GPU), or pin the "
          "product this host really is in the config's policy gpu.sku.products.")
FLASH = ("Flash the approved {what} with the vendor's firmware update tool (NVIDIA's nvfwupd "
         "or the server vendor's bundle), then reset or power-cycle; or add the version to "
         "policy gpu.sku.products[].{key} once it is approved.")


def _name(pci_device_id: int) -> str:
    found = product_of(pci_device_id)
    return found.name if found else "unknown"


def _bounds(value: Optional[float], bounds: Bounds) -> Optional[str]:
    """The violated bound as text, or None when within (or not judged)."""
    if value is None:
        return None
    if bounds.min is not None and value < bounds.min:
        return f">= {bounds.min:g}"
    if bounds.max is not None and value > bounds.max:
        return f"<= {bounds.max:g}"
    return None


class _Judged:
    """The findings plus the structured mismatches (details.mismatches)."""

    def __init__(self) -> None:
        self.f = Findings()
        self.mismatches: List[Dict[str, Any]] = []

    def fail(self, code: str, gpu: Mapping[str, Any], product: str, field: str, want: str,
             have: Any) -> None:
        shown = self.mismatch(code, gpu, product, field, want, have)
        self.f.fail(code, f"{gpu_label(gpu)} {product}: {field} {shown}, want {want}", gpu)

    def mismatch(self, code: str, gpu: Mapping[str, Any], product: str, field: str, want: str,
                 have: Any) -> Any:
        """Record one mismatch for details.mismatches; returns ``have`` as shown."""
        if isinstance(have, float) and have.is_integer():
            have = int(have)
        shown = text(have, 60) if isinstance(have, str) else have
        bus = gpu.get("pci_bus_id")  # any snapshot string: bounded as the summary bounds it
        self.mismatches.append({"gpu": gpu.get("index"),
                                "pci_bus_id": text(bus) if bus is not None else None,
                                "product": product, "field": field, "want": want,
                                "have": shown, "code": code})
        return shown

    def value(self, gpu: Mapping[str, Any], name: str) -> Optional[Any]:
        """The GPU's field, or None after recording why it cannot be judged."""
        found = gpu.get(name)
        if found is None:
            err: Any = (gpu.get("errors") or {}).get(name)
            err = err if isinstance(err, Mapping) else {}
            self.f.unreadable.append((FIELD_UNREADABLE, f"{gpu_label(gpu)} {name}: "
                                      f"{text(err.get('kind', 'missing'))}"))
        return found


# (field as named in findings, reader of the GPU's value, the spec's test, code)
Reader = Callable[[_Judged, Mapping[str, Any], str], Any]


def _memory_mib(j: _Judged, gpu: Mapping[str, Any], where: str) -> Optional[int]:
    mem = j.value(gpu, "memory")
    if mem is None:
        return None
    if not isinstance(mem, Mapping):
        raise SnapshotError(f"{where}.memory", "an object", mem)
    total = opt_int(mem, "total_bytes", f"{where}.memory")
    return None if total is None else total // MIB  # what nvidia-smi prints: floor MiB


def _string(name: str) -> Reader:
    def read(j: _Judged, gpu: Mapping[str, Any], where: str) -> Optional[str]:
        found = j.value(gpu, name)
        return None if found is None else opt_str(gpu, name, where)
    return read


def _nvlinks(j: _Judged, gpu: Mapping[str, Any], where: str) -> Optional[int]:
    link = j.value(gpu, "nvlink")
    if link is None:
        return None
    if not isinstance(link, Mapping) or not isinstance(link.get("links", []), list):
        raise SnapshotError(f"{where}.nvlink", "an object with a links list", link)
    return len(link.get("links") or [])


def _sub_int(name: str, key: str, scale: float = 1.0) -> Reader:
    def read(j: _Judged, gpu: Mapping[str, Any], where: str) -> Optional[float]:
        obj = j.value(gpu, name)
        if obj is None:
            return None
        if not isinstance(obj, Mapping):
            raise SnapshotError(f"{where}.{name}", "an object", obj)
        found = opt_int(obj, key, f"{where}.{name}")
        return None if found is None else found / scale
    return read


def _judge_gpu(j: _Judged, gpu: Mapping[str, Any], where: str, spec: SkuProduct,
               table_mib: Optional[int]) -> None:
    name = spec.product
    memory_min = spec.memory_mib_min if spec.memory_mib_min is not None else table_mib
    if memory_min is not None:
        mib = _memory_mib(j, gpu, where)
        if mib is not None and mib < memory_min:
            j.fail(MEMORY_BELOW, gpu, name, "memory MiB", f">= {memory_min}", mib)
    for field, allowed, code in (("vbios_version", spec.vbios_allowed, VBIOS),
                                 ("inforom_image_version", spec.inforom_allowed, INFOROM)):
        if allowed:
            have = _string(field)(j, gpu, where)
            if have is not None and have not in allowed:
                j.fail(code, gpu, name, field, "one of " + ", ".join(allowed), have)
    if spec.nvlink_links is not None:
        links = _nvlinks(j, gpu, where)
        if links is not None and links != spec.nvlink_links:
            j.fail(NVLINK, gpu, name, "NVLinks", str(spec.nvlink_links), links)
    checks: Tuple[Tuple[str, Reader, Bounds, str], ...] = (
        ("power limit W (enforced)", _sub_int("power_limit", "enforced_mw", 1000.0),
         spec.power_limit_w, POWER),
        ("applications clock graphics MHz", _sub_int("applications_clocks", "graphics_mhz"),
         spec.applications_clocks_mhz.graphics, CLOCKS),
        ("applications clock memory MHz", _sub_int("applications_clocks", "memory_mhz"),
         spec.applications_clocks_mhz.memory, CLOCKS),
    )
    for field, read, bounds, code in checks:
        if bounds.min is None and bounds.max is None:
            continue
        have = read(j, gpu, where)
        broken = _bounds(have, bounds)
        if broken is not None:
            j.fail(code, gpu, name, field, broken, have)


def _judge(host: HostView, policy: ResolvedPolicy, snap: GpuSnapshot) -> Outcome:
    pinned = {p.product: p for p in gpu_policy(policy).sku.products}
    j = _Judged()
    f = j.f
    seen: List[Tuple[Mapping[str, Any], str, int]] = []  # (gpu, where, pci_device_id)
    for record, device_id in each_field(snap, "pci_device_id", f, expected=int):
        seen.append((record, f.gpu_where, int(device_id)))
    for index in f.unsupported:  # a GPU NVML cannot identify cannot be held to a product
        f.unreadable.append((FIELD_UNREADABLE, f"GPU {index} pci_device_id: not_supported"))
    f.unsupported = []
    counts: Dict[str, int] = {}
    for _, _, device_id in seen:
        found = product_of(device_id)
        if found is not None and found.name in pinned:
            counts[found.name] = counts.get(found.name, 0) + 1
    order = list(pinned)
    host_product = max(counts, key=lambda n: (counts[n], -order.index(n))) if counts else None
    host_id = next((d for _, _, d in seen if _name(d) == host_product), None)
    groups: Dict[str, List[int]] = {}
    for gpu, where, device_id in seen:
        found = product_of(device_id)
        f.per_gpu[gpu["index"]] = {"product": describe(device_id),
                                   "pci_device_id": f"0x{device_id:08X}"}
        if host_product is None:
            groups.setdefault(describe(device_id), []).append(gpu["index"])
            j.mismatch(NOT_PINNED, gpu, _name(device_id), "product",
                       "one of " + ", ".join(pinned), describe(device_id))
        elif found is None or found.name != host_product:
            j.fail(MIXED, gpu, _name(device_id), "product",
                   f"{describe(host_id or 0)}, the product of {counts[host_product]} GPU(s)",
                   describe(device_id))
        else:
            try:
                _judge_gpu(j, gpu, where, pinned[host_product], found.memory_mib)
            except SnapshotError as exc:
                f.unreadable.append((SNAPSHOT_MALFORMED, f"malformed snapshot: {exc}"))
    for product, indices in groups.items():  # one line per product, not per GPU
        f.fail(NOT_PINNED, f"GPU {', '.join(map(str, indices))}: {product}; policy gpu.sku "
                           f"pins {', '.join(pinned)}")
    what = host_product or "any pinned product"
    return f.outcome("{n} GPU(s) are " + what + ", as pinned (policy gpu.sku)", "GPU SKU",
                     host_product=host_product, pinned=order, mismatches=j.mismatches)


def _gpu_sku(host: HostView, policy: ResolvedPolicy) -> Outcome:
    if not gpu_policy(policy).sku.products:
        return not_applicable("no SKU pinned (policy gpu.sku.products is empty)")
    return _checked(host, policy)


_checked = gpu_check(_judge)

GPU_SKU = Check(
    id="gpu-sku",
    title="GPUs are the pinned product (PCI device id), with the pinned memory, VBIOS, InfoROM, "
          "NVLinks, power limit and clocks",
    severity=Severity.CRITICAL,
    gates=ALL_PATHS,
    interval=Interval.SLOW,
    remediation="Replace or re-flash what differs from the pinned product, or correct policy "
                "gpu.sku.products.",
    run=_gpu_sku,
    uses_gpus=True,
    requires=NVML_REQUIRES,
    since_policy=2,
    failures=(
        Failure(MIXED, Status.FAIL, "the host's GPUs are not all one product: a GPU's PCI "
                "device id names another product than the host's pinned one", RETURN,
                SOURCE_IDENTITY),
        Failure(NOT_PINNED, Status.FAIL, "no GPU on the host is a product policy gpu.sku "
                "pins", RETURN, SOURCE_IDENTITY),
        Failure(MEMORY_BELOW, Status.FAIL, "a GPU's framebuffer (MiB, as NVML reports it) is "
                "below its product's figure or the pinned minimum",
                "Drain the node and have the GPU replaced (a GPU reporting less memory than its "
                "product is defective or mislabelled); check `nvidia-smi -q -d MEMORY`.",
                f"nvml.h nvmlDeviceGetMemoryInfo; {SMI}"),
        Failure(VBIOS, Status.FAIL, "a GPU's VBIOS version is not in the product's allow-list",
                FLASH.format(what="VBIOS", key="vbios_allowed"),
                f"nvml.h nvmlDeviceGetVbiosVersion; {SMI}"),
        Failure(INFOROM, Status.FAIL, "a GPU's InfoROM image version is not in the product's "
                "allow-list", FLASH.format(what="InfoROM image", key="inforom_allowed"),
                f"nvml.h nvmlDeviceGetInforomImageVersion; {SMI}"),
        Failure(NVLINK, Status.FAIL, "a GPU reports another number of NVLinks than its product "
                "pins", "Check the baseboard or NVLink bridges (`nvidia-smi nvlink -s`); a "
                "GPU with the wrong link count is the wrong part or badly seated.",
                "nvml.h nvmlDeviceGetNvLinkState (docs/gpu-snapshot.md nvlink)"),
        Failure(POWER, Status.FAIL, "a GPU's enforced power limit is outside the product's "
                "bounds", "Restore the power limit (`nvidia-smi -i N -pl W`, or the BMC's "
                "power capping) or correct policy gpu.sku.products[].power_limit_w.",
                "nvml.h nvmlDeviceGetEnforcedPowerLimit; `nvidia-smi -q -d POWER`"),
        Failure(CLOCKS, Status.FAIL, "a GPU's applications clocks are outside the product's "
                "bounds", "Reset the applications clocks (`nvidia-smi -i N -rac`) or set them "
                "(`nvidia-smi -i N -ac MEM,GRAPHICS`), or correct policy "
                "gpu.sku.products[].applications_clocks_mhz.",
                "nvml.h nvmlDeviceGetApplicationsClock; `nvidia-smi -q -d CLOCK`"),
    ) + snapshot_failures(),
)
