"""The `gpu` policy section: thresholds for the GPU health checks, as data.

Defaults are in policy_v1.yaml (each one cited there) and repeated here so a policy file
without the section still validates. checks.policy.Policy carries it as ``policy.gpu``.
"""
from typing import List, Literal, Optional

from agent.model import PATHS
from agent.safeio.schema import Field, Record, field_validator, model_validator
from checks.gpu.sku_table import NAMES


class _Strict(Record, frozen=True):
    """Unknown keys are refused."""


class EccPolicy(_Strict):
    # Volatile (since the last driver load) uncorrectable errors above this fail.
    volatile_uncorrected_max: int = Field(default=0, ge=0)
    # Aggregate (lifetime) counts above these warn; null = not checked.
    aggregate_uncorrected_warn_above: Optional[int] = Field(default=0, ge=0)
    aggregate_corrected_warn_above: Optional[int] = Field(default=None, ge=0)


class RemapPolicy(_Strict):
    pending: Literal["warn", "fail"] = "warn"
    failure: Literal["warn", "fail"] = "fail"


class ThermalPolicy(_Strict):
    # Fail at (slowdown threshold - margin), warn within warn_margin_c below that.
    slowdown_margin_c: int = Field(default=0, ge=0, le=50)
    warn_margin_c: int = Field(default=5, ge=0, le=50)
    # Clock-event reasons that are a fault when active (nvml.h names, decoded).
    fault_reasons: List[str] = [
        "hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown",
    ]


class PciePolicy(_Strict):
    width_below_max: Literal["warn", "fail"] = "fail"


class FabricPolicy(_Strict):
    ok_states: List[str] = ["completed"]
    # PCI class of an NVSwitch (bridge, other): its presence makes a host an NVSwitch system.
    nvswitch_pci_classes: List[str] = ["0680"]


class MigPolicy(_Strict):
    # A GPU with MIG on and no MIG device offers nothing to allocate. "ignore" keeps policy
    # version 1's verdict; version 2 fails it (policy_v2.yaml).
    no_instances: Literal["ignore", "fail"] = "ignore"
    # The paths whose allocator reads gpu.mig_strategy (the device plugin's MIG strategy).
    # Version 1 compares it on every path; version 2 only where a device plugin allocates.
    strategy_paths: List[str] = list(PATHS)


class Bounds(_Strict):
    """Inclusive bounds; an unset side is not judged."""

    min: Optional[float] = Field(default=None, ge=0)
    max: Optional[float] = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> "Bounds":
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min:g} is above max {self.max:g}")
        return self


class ClockBounds(_Strict):
    graphics: Bounds = Bounds()
    memory: Bounds = Bounds()


class SkuProduct(_Strict):
    """One product a site runs, as gpu-sku pins it (docs/config.md "Pinning the GPU SKU").
    Every field but ``product`` is optional: unset = not judged."""

    # The pci.ids device name (checks/gpu/sku_table.py PRODUCTS), e.g. "H100 SXM5 80GB".
    product: str
    # Framebuffer MiB as NVML reports it; unset = the table's figure for the product, if any.
    memory_mib_min: Optional[int] = Field(default=None, ge=0)
    vbios_allowed: List[str] = []
    inforom_allowed: List[str] = []
    # NVLinks NVML reports per GPU (0 = a GPU without NVLink).
    nvlink_links: Optional[int] = Field(default=None, ge=0)
    # The enforced power limit (nvmlDeviceGetEnforcedPowerLimit), in watts.
    power_limit_w: Bounds = Bounds()
    applications_clocks_mhz: ClockBounds = ClockBounds()

    @field_validator("product")
    @classmethod
    def _known(cls, value: str) -> str:
        if value not in NAMES:
            raise ValueError(f"unknown product {value!r} (checks/gpu/sku_table.py names: "
                             + ", ".join(sorted(NAMES)) + ")")
        return value


class SkuPolicy(_Strict):
    # The products this site runs; [] = nothing pinned (gpu-sku is not applicable).
    products: List[SkuProduct] = []

    @model_validator(mode="after")
    def _unique(self) -> "SkuPolicy":
        names = [p.product for p in self.products]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"product {twice[0]!r} is pinned twice")
        return self


class GpuPolicy(_Strict):
    ecc: EccPolicy = EccPolicy()
    row_remap: RemapPolicy = RemapPolicy()
    thermal: ThermalPolicy = ThermalPolicy()
    pcie: PciePolicy = PciePolicy()
    fabric: FabricPolicy = FabricPolicy()
    mig: MigPolicy = MigPolicy()
    sku: SkuPolicy = SkuPolicy()
