"""ALL_CHECKS: the explicit registry, in the order reports list them.

Only the command line (the composition root) imports this module.
"""
from typing import Tuple

from agent.model import Check
from checks.allocation.allocation_owner import ALLOCATION_OWNER
from checks.allocation.gpu_capacity import GPU_CAPACITY
from checks.containerd.cdi_spec_current import CDI_SPEC_CURRENT
from checks.containerd.cgroup_driver import CONTAINERD_CGROUP_DRIVER
from checks.containerd.containerd_cdi import CONTAINERD_CDI
from checks.containerd.containerd_nvidia_runtime import CONTAINERD_NVIDIA_RUNTIME
from checks.driver.driver_branch import DRIVER_BRANCH
from checks.driver.driver_library_match import DRIVER_LIBRARY_MATCH
from checks.driver.driver_loaded import DRIVER_LOADED
from checks.driver.open_module import DRIVER_OPEN_MODULE
from checks.fabric.imex import IMEX
from checks.gpu.driver_persistence import DRIVER_PERSISTENCE
from checks.gpu.fabric_manager import FABRIC_MANAGER
from checks.gpu.gpu_count import GPU_COUNT
from checks.gpu.gpu_ecc import GPU_ECC
from checks.gpu.gpu_nvlink import GPU_NVLINK
from checks.gpu.gpu_pcie_link import GPU_PCIE_LINK
from checks.gpu.gpu_row_remap import GPU_ROW_REMAP
from checks.gpu.gpu_sku import GPU_SKU
from checks.gpu.gpu_thermal import GPU_THERMAL
from checks.gpu.mig_geometry import MIG_GEOMETRY
from checks.gpu.mig_mode import MIG_MODE
from checks.kubelet_version import KUBELET_VERSION
from checks.nvml_responsive import NVML_RESPONSIVE
from checks.operator.gpu_operator import GPU_OPERATOR
from checks.os_supported import OS_SUPPORTED
from checks.registration_labels import REGISTRATION_LABELS
from checks.runtimeclass_handler import RUNTIMECLASS_HANDLER
from checks.time.time_sync import TIME_SYNC
from checks.toolkit_runtime_config import TOOLKIT_RUNTIME_CONFIG
from checks.toolkit_version import TOOLKIT_VERSION
from checks.workload.gpu_workload import GPU_WORKLOAD
from checks.xid.gpu_xid import GPU_XID

# Report order: the host stack first, then the container stack, then health.
ALL_CHECKS: Tuple[Check, ...] = (
    OS_SUPPORTED,
    DRIVER_LOADED,
    DRIVER_BRANCH,
    DRIVER_OPEN_MODULE,
    DRIVER_LIBRARY_MATCH,
    NVML_RESPONSIVE,
    GPU_COUNT,
    GPU_SKU,
    DRIVER_PERSISTENCE,
    FABRIC_MANAGER,
    IMEX,
    TOOLKIT_VERSION,
    TOOLKIT_RUNTIME_CONFIG,
    GPU_OPERATOR,
    CONTAINERD_NVIDIA_RUNTIME,
    CONTAINERD_CDI,
    CONTAINERD_CGROUP_DRIVER,
    CDI_SPEC_CURRENT,
    KUBELET_VERSION,
    ALLOCATION_OWNER,
    GPU_CAPACITY,
    REGISTRATION_LABELS,
    MIG_MODE,
    MIG_GEOMETRY,
    RUNTIMECLASS_HANDLER,
    GPU_WORKLOAD,
    TIME_SYNC,
    GPU_XID,
    GPU_ECC,
    GPU_ROW_REMAP,
    GPU_THERMAL,
    GPU_PCIE_LINK,
    GPU_NVLINK,
)


def by_id() -> "dict[str, Check]":
    return {c.id: c for c in ALL_CHECKS}
