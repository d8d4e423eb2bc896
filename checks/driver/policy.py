"""The driver section's open-kernel-module requirement (``policy.driver.require_open_module``).

A GPU named here needs NVIDIA's open GPU kernel modules: with the proprietary module loaded the
module loads but the GPU does not initialise (``NVRM: ... requires use of the NVIDIA open
kernel modules``, then ``RmInitAdapter failed``), so NVML sees no device. NVIDIA Technical Blog,
"NVIDIA Transitions Fully Towards Open-Source GPU Kernel Modules" (July 2024): "For
cutting-edge platforms such as NVIDIA Grace Hopper or NVIDIA Blackwell, you must use the
open-source GPU kernel modules. The proprietary drivers are unsupported on these platforms."

The default (what policy version 1 gets) names nothing: no GPU is held to it. policy_v2.yaml
lists the data center Blackwell and Grace Hopper GPUs, by NVML product name and by PCI device
id, since a GPU the proprietary module could not initialise is on PCI but not in NVML.
"""
import re
from typing import List

from agent.safeio.schema import Record, field_validator

# "10de:2901": vendor and device, four hex digits each, as sysfs and `lspci -n` print them.
_PCI_ID = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{4}$")


class OpenModulePolicy(Record, frozen=True):
    # NVML product names (nvmlDeviceGetName), matched whole or as a prefix ending at a word
    # boundary: "NVIDIA B300" holds "NVIDIA B300 SXM6 AC", never "NVIDIA B3000".
    products: List[str] = []
    # PCI vendor:device ids, lower case ("10de:2901").
    pci_device_ids: List[str] = []

    @field_validator("pci_device_ids")
    @classmethod
    def _pci_ids(cls, ids: List[str]) -> List[str]:
        out = []
        for value in ids:
            v = value.strip().lower()
            if not _PCI_ID.match(v):
                raise ValueError(f"{value!r} is not a PCI vendor:device id like 10de:2901")
            out.append(v)
        return out

    @field_validator("products")
    @classmethod
    def _products(cls, names: List[str]) -> List[str]:
        for name in names:
            if not name.strip():
                raise ValueError("an empty product name would match every GPU")
        return [n.strip() for n in names]

    def names_product(self, name: str) -> bool:
        return any(name == p or name.startswith(p + " ") for p in self.products)
