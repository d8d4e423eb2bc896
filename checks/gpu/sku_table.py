"""Which product a GPU is, from its PCI device id (never from the marketing name NVML reports):
the table gpu-sku (checks/gpu/gpu_sku.py) and its policy section (checks/gpu/policy.py
SkuProduct) share.

Names are the bracketed device names of the PCI ID Repository's pci.ids, version 2026.05.24
(pciutils/pciids @006181e2, vendor 10de): "GH100 [H100 SXM5 80GB]" -> "H100 SXM5 80GB". The
form factor is the one the name states (SXM*, PCIe, NVL); "unstated" where pci.ids does not
say it, except 0x2321 ("H100L 94GB"), which `nvidia-smi -q` names "NVIDIA H100 NVL" (a PCIe card
with NVLink bridges; thamada/nvidia-smi @198aebb nvsim/H100NVLx2_smi.py, Device Id 0x232110DE).

``memory_mib`` is the framebuffer NVML reports (nvmlDeviceGetMemoryInfo total / 2**20, what
`nvidia-smi -q` prints as "FB Memory Usage / Total"), only where a real capture shows it; a GB
figure is never converted (NVIDIA's "80 GB" H100 reports 81,559 MiB):
- 0x2330: 81559 MiB, leptonai/gpud @a7cdf53 components/accelerator/nvidia/query/testdata/
  nvidia-smi-query.535.183.01.out.0.valid (copy: tests/fixtures/upstream/);
- 0x2335: 143771 MiB, thamada/gls @c0bed08 gls/H200_smi.py (driver 550.90.12);
- 0x2321: 95830 MiB, thamada/nvidia-smi @198aebb nvsim/H100NVLx2_smi.py (driver 550.54.14).
"""
from typing import Dict, NamedTuple, Optional

PCI_IDS = "pci.ids 2026.05.24 (pciutils/pciids @006181e2, vendor 10de)"
NVIDIA_VENDOR = 0x10DE
UNSTATED = "unstated"


class Product(NamedTuple):
    name: str  # pci.ids bracket name
    form_factor: str  # sxm, pcie, nvl or unstated
    memory_mib: Optional[int] = None  # as NVML reports it, where a capture shows it


# PCI device id -> product. Data-center parts only; a device id not here is "unknown".
PRODUCTS: Dict[int, Product] = {
    # Ampere (GA100)
    0x20B0: Product("A100 SXM4 40GB", "sxm"),
    0x20B1: Product("A100 PCIe 40GB", "pcie"),
    0x20B2: Product("A100 SXM4 80GB", "sxm"),
    0x20B5: Product("A100 PCIe 80GB", "pcie"),
    0x20B7: Product("A30 PCIe", "pcie"),
    0x20F1: Product("A100 PCIe 40GB", "pcie"),
    # Hopper (GH100)
    0x2321: Product("H100L 94GB", "nvl", 95830),
    0x2322: Product("H800 PCIe", "pcie"),
    0x2324: Product("H800", UNSTATED),
    0x2330: Product("H100 SXM5 80GB", "sxm", 81559),
    0x2331: Product("H100 PCIe", "pcie"),
    0x2335: Product("H200 SXM 141GB", "sxm", 143771),
    0x2337: Product("H100 SXM5 64GB", "sxm"),
    0x2338: Product("H100 SXM5 96GB", "sxm"),
    0x2339: Product("H100 SXM5 94GB", "sxm"),
    0x233A: Product("H800L 94GB", UNSTATED),
    0x233B: Product("H200 NVL", "nvl"),
    0x233D: Product("H100 96GB", UNSTATED),
    0x2342: Product("GH200 120GB / 480GB", UNSTATED),
    0x2348: Product("GH200 144G HBM3e", UNSTATED),
    # Ada (AD102/AD104)
    0x26B5: Product("L40", UNSTATED),
    0x26B9: Product("L40S", UNSTATED),
    0x27B8: Product("L4", UNSTATED),
    # Blackwell (GB100/GB110)
    0x2901: Product("B200", UNSTATED),
    0x2909: Product("HGX B200 168GB", UNSTATED),
    0x2941: Product("HGX GB200", UNSTATED),
    0x3182: Product("B300 SXM6 AC", "sxm"),
    0x31C2: Product("GB300", UNSTATED),
    0x31C3: Product("GB300", UNSTATED),
}
NAMES = frozenset(p.name for p in PRODUCTS.values())


def device_of(pci_device_id: int) -> int:
    """nvmlPciInfo_t.pciDeviceId carries the device id in its upper 16 bits and the vendor
    in the lower (0x233010DE = 10de:2330, nvml.h)."""
    return (pci_device_id >> 16) & 0xFFFF


def product_of(pci_device_id: int) -> Optional[Product]:
    """The product of an NVIDIA PCI device id as NVML reports it; None if not in the table
    (or not NVIDIA's)."""
    if pci_device_id & 0xFFFF != NVIDIA_VENDOR:
        return None
    return PRODUCTS.get(device_of(pci_device_id))


def describe(pci_device_id: int) -> str:
    """`H100 SXM5 80GB (10de:2330, sxm)` or `unknown (10de:1234)`."""
    found = product_of(pci_device_id)
    pci = f"{pci_device_id & 0xFFFF:04x}:{device_of(pci_device_id):04x}"
    return f"{found.name} ({pci}, {found.form_factor})" if found else f"unknown ({pci})"
