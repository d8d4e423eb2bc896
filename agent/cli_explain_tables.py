"""The tables `explain` and the generated docs/checks.md print beside each check's own
declaration: where each live fact comes from, the GPU snapshot fields and NVML calls behind
each GPU check, the policy keys and config settings each check decides with, and the per-path
rules (agent/explain.py renders them).
"""
from typing import Mapping, Tuple

from agent.model import DRA_PATHS

# Where each live fact comes from (agent/host/live.py, agent/kube/facts.py, agent/xid/state.py).
FACT_SOURCES: Mapping[str, str] = {
    "pci_devices": "PCI functions of vendor 10de (udev; else /sys/bus/pci/devices/*/"
    "{vendor,device,class} and the driver link)",
    "dev_nodes": "/dev/nvidia* character devices with their major/minor numbers (stat), and "
    "those one level down in /dev/nvidia* directories (/dev/nvidia-caps/nvidia-capN, the IMEX "
    "channels /dev/nvidia-caps-imex-channels/channelN)",
    "adjtimex": "the kernel's clock discipline state (adjtimex(2), modes 0: read-only)",
    "node": "this host's Node from the Kubernetes API (labels, capacity, allocatable)",
    "runtimeclasses": "RuntimeClass objects from the Kubernetes API",
    "resourceslices": "this node's ResourceSlices from the Kubernetes API (resource.k8s.io/v1, "
    "listed with fieldSelector=spec.nodeName=<node>)",
    "sticky": "the agent's sticky-fault state (<state_dir>/sticky.json, keyed by boot id)",
}

KERNEL_LOG = "the kernel log since boot: /dev/kmsg (NVRM lines), else `journalctl -k -b`"

# The GPU snapshot fields each NVML check reads, with the NVML call behind each
# (docs/gpu-snapshot.md has the full schema).
NVML_FIELDS: Mapping[str, Tuple[str, ...]] = {
    "nvml-responsive": (
        "driver_version (nvmlSystemGetDriverVersion)",
        "nvml_version (nvmlSystemGetNVMLVersion)",
        "cuda_driver_version (nvmlSystemGetCudaDriverVersion)",
        "device_count (nvmlDeviceGetCount)",
        "error (nvmlInit / worker deadline)",
    ),
    "gpu-count": (
        "device_count (nvmlDeviceGetCount)",
        "pci_bus_id (nvmlDeviceGetPciInfo_v3)",
        "error per GPU (lost GPUs)",
    ),
    "driver-persistence": ("persistence_mode (nvmlDeviceGetPersistenceMode)",),
    "fabric-manager": ("fabric (nvmlDeviceGetGpuFabricInfo)",),
    "driver-open-module": ("name (nvmlDeviceGetName)", "pci_bus_id (nvmlDeviceGetPciInfo)"),
    "gpu-workload": ("uuid (nvmlDeviceGetUUID): what the container must list",),
    "gpu-sku": ("pci_device_id (nvmlDeviceGetPciInfo_v3 pciDeviceId: the product, pci.ids)",
                "memory (nvmlDeviceGetMemoryInfo total, MiB)",
                "vbios_version, inforom_image_version (nvmlDeviceGetVbiosVersion, "
                "nvmlDeviceGetInforomImageVersion)",
                "nvlink (nvmlDeviceGetNvLinkState: links reported)",
                "power_limit (nvmlDeviceGetEnforcedPowerLimit), applications_clocks "
                "(nvmlDeviceGetApplicationsClock)"),
    "imex": ("fabric (nvmlDeviceGetGpuFabricInfo: state, status, clique_id)",),
    "cdi-spec-current": ("the GPU list (nvmlDeviceGetCount, index per GPU)",),
    "mig-mode": (
        "mig (nvmlDeviceGetMigMode: current and pending; mig.devices: the MIG devices, "
        "nvmlDeviceGetMigDeviceHandleByIndex)",
    ),
    "mig-geometry": (
        "name (nvmlDeviceGetName: a gpu.mig_geometry product key)",
        "mig (nvmlDeviceGetMigMode; mig.devices: GPU instance id and profile per MIG device, "
        "nvmlDeviceGetGpuInstanceById, nvmlDeviceGetGpuInstanceProfileInfoV)",
    ),
    "gpu-xid": (
        "index, uuid, pci_bus_id (nvmlDeviceGetUUID, nvmlDeviceGetPciInfo_v3): "
        "to name the GPU an XID line points at",
    ),
    "gpu-ecc": (
        "ecc (nvmlDeviceGetEccMode, nvmlDeviceGetTotalEccErrors volatile and aggregate)",
    ),
    "gpu-row-remap": ("remapped_rows (nvmlDeviceGetRemappedRows)",),
    "gpu-thermal": (
        "temperature (nvmlDeviceGetTemperature, nvmlDeviceGetTemperatureThreshold SLOWDOWN)",
        "clock_event_reasons (nvmlDeviceGetCurrentClocksEventReasons)",
    ),
    "gpu-pcie-link": (
        "pcie (nvmlDeviceGetCurrPcieLinkWidth/Generation, nvmlDeviceGetMaxPcieLinkWidth/"
        "Generation)",
    ),
    "gpu-nvlink": ("nvlink (nvmlDeviceGetNvLinkState per link)",),
    "allocation-owner": (
        "the GPU list and mig (nvmlDeviceGetCount, nvmlDeviceGetMigMode): an allocatable "
        "nvidia.com/gpu above it is time-slicing",
    ),
    "gpu-capacity": (
        "uuid and error per GPU (nvmlDeviceGetUUID; lost GPUs), mig (nvmlDeviceGetMigMode, "
        "MIG device UUIDs when listed): what the kubelet may advertise",
    ),
}

# Policy keys (dotted, under checks/policy_v<N>.yaml) each check decides with.
POLICY_KEYS: Mapping[str, Tuple[str, ...]] = {
    "os-supported": ("os.supported", "os.deprecated"),
    "driver-branch": (
        "driver.minimum_branch",
        "driver.allowed_branches",
        "driver.warn_past_end_of_life_paths",
        "driver.managed_by_operator",
        "driver.branches",
    ),
    "driver-open-module": ("driver.require_open_module",),
    "toolkit-version": ("toolkit.minimum_version", "toolkit.managed_by_operator",
                        "toolkit.security_floor"),
    "gpu-operator": ("operator.ownership_conflicts", "operator.grace_period_s"),
    "allocation-owner": ("sharing.allowed",),
    "mig-mode": ("gpu.mig",),
    "gpu-sku": ("gpu.sku",),
    "containerd-nvidia-runtime": ("containerd.partial_cri_table_warns",),
    "runtimeclass-handler": ("containerd.runtimeclass_effective",),
    "kubelet-version": ("kubelet.minimum_version",),
    "fabric-manager": ("gpu.fabric",),
    "imex": ("imex.host_service_conflict",),
    "gpu-ecc": ("gpu.ecc",),
    "gpu-row-remap": ("gpu.row_remap",),
    "gpu-thermal": ("gpu.thermal",),
    "gpu-pcie-link": ("gpu.pcie",),
}

# Config settings (not policy) a check decides with, and where they are documented.
SETTING_KEYS: Mapping[str, Tuple[Tuple[str, str], ...]] = {
    "time-sync": (
        ("time_sync.offset_warn_s", "docs/time-sync.md"),
        ("time_sync.offset_fail_s", "docs/time-sync.md"),
        ("time_sync.reach_polls", "docs/time-sync.md"),
    ),
    "gpu-count": (("expected_gpus", "docs/config.md"),),
    "mig-mode": (("gpu.mig_strategy", "docs/config.md"),),
    "containerd-nvidia-runtime": (("containerd.handler", "docs/checks-container.md"),),
    "runtimeclass-handler": (
        ("kube.runtimeclass", "docs/kubernetes.md"),
        ("containerd.handler", "docs/checks-container.md"),
    ),
    "cdi-spec-current": (("cdi.require_spec", "docs/checks-container.md"),),
    "imex": (("imex.compute_domains", "docs/config.md"),),
    "mig-geometry": (("gpu.mig_geometry", "docs/config.md"),),
    "toolkit-runtime-config": (("toolkit.device_list_strategy", "docs/config.md"),),
    "allocation-owner": (("gpu.device_plugin_config_files", "docs/config.md"),),
}


def _allocation_owner(path: str) -> str:
    # DRA paths expect the DRA kubelet plugin; the others the device plugin (docs/decisions.md).
    return "the NVIDIA DRA kubelet plugin" if path in DRA_PATHS else "the NVIDIA device plugin"


PATH_RULES = {"allocation-owner": ("expected GPU owner", _allocation_owner)}
