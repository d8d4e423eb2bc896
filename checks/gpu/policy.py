"""The `gpu` policy section: thresholds for the GPU health checks, as data.

Defaults are in policy_v1.yaml (each one cited there) and repeated here so a policy file
without the section still validates. checks.policy.Policy carries it as ``policy.gpu``.
"""
from typing import List, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from agent.model import PATHS


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


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


class GpuPolicy(_Strict):
    ecc: EccPolicy = EccPolicy()
    row_remap: RemapPolicy = RemapPolicy()
    thermal: ThermalPolicy = ThermalPolicy()
    pcie: PciePolicy = PciePolicy()
    fabric: FabricPolicy = FabricPolicy()
    mig: MigPolicy = MigPolicy()
