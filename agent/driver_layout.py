"""Where an NVIDIA driver's user-space libraries live under a root: the host's own "/" or the
GPU Operator's driver container root.

The checks (driver-library-match) and the NVML loader (agent/host/driver_root.py) read the same
directories, so they are written once, here in the core that both may import.

- Debian/Ubuntu multiarch directories (Debian Policy 9.1.1, "File System Structure", and the
  multiarch tuples x86_64-linux-gnu / aarch64-linux-gnu) first, then RHEL/Amazon Linux's
  /usr/lib64 (Filesystem Hierarchy Standard 3.0, 4.7 "/usr/lib<qual>"), then /usr/lib.
- The GPU Operator's driver container mounts its root at /run/nvidia/driver on the host (GPU
  Operator documentation, "Installing the NVIDIA GPU Operator", driver container; the
  container-toolkit's `root` setting points there): its libraries are under that root in
  the same directories, for the distribution the container image is built on.
"""
from typing import Tuple

LIB_DIRS: Tuple[str, ...] = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
)
# The soname every NVML client loads (nvml.h; pynvml's _LoadNvmlLibrary on Linux).
NVML_SONAME = "libnvidia-ml.so.1"
# The root the GPU Operator's driver container exposes on the host.
OPERATOR_DRIVER_ROOT = "/run/nvidia/driver"

# The GPU Operator's driver upgrade: the Node label its upgrade controller sets
# (NVIDIA/k8s-operator-libs pkg/upgrade: "nvidia.com/%s-driver-upgrade-state" with the driver
# name "gpu", NVIDIA/gpu-operator cmd/gpu-operator/main.go), and the states (pkg/upgrade/
# consts.go) from the first that removes the GPU workloads to let the driver go until the
# driver pod is restarted: pod-restart-required is where the controller deletes the driver pod
# (common_manager.go ProcessPodRestartNodes). In them the driver is absent by design: `run`
# releases NVML (agent/daemon/upgrade.py) and the driver checks do not call it late
# (checks/operator/state.py).
UPGRADE_STATE_LABEL = "nvidia.com/gpu-driver-upgrade-state"
DRIVER_REPLACED_STATES = frozenset({
    "pod-deletion-required",
    "drain-required",
    "node-maintenance-required",
    "post-maintenance-required",
    "pod-restart-required",
})
