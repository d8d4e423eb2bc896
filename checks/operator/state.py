"""What the driver and toolkit checks share when the NVIDIA GPU Operator installs them: who
owns the component on this path, whether the operator's copy is on the host yet, the
validator's readiness markers, time since boot, and the one "waiting" verdict.

Sources:
- NVIDIA/gpu-operator, cmd/nvidia-validator/main.go: defaultStatusPath
  "/run/nvidia/validations"; driverContainerStatusFilePath "<dir>/.driver-ctr-ready" (the
  driver container's startup probe writes it once nvidia-smi works inside the container);
  driverStatusFile "driver-ready", toolkitStatusFile "toolkit-ready", cudaStatusFile
  "cuda-ready", pluginStatusFile "plugin-ready" (the validator writes each once that
  component validated; driver-ready holds "IS_HOST_DRIVER=<bool>" and "NVIDIA_DRIVER_ROOT=").
- The driver container's root at /run/nvidia/driver (agent/driver_layout.py), its libraries
  in the same directories as on a host (LIB_DIRS), or in any directory the root's own
  /etc/ld.so.cache names (ld.so(8); the NVML loader, agent/host/driver_root.py, finds it
  there too, so "present" here means what NVML can load).
- The toolkit container installs into <installDir>/toolkit (checks/operator/policy.py).
"""
import posixpath
from typing import Any, Dict, List, Optional, Sequence, Tuple

from agent.driver_layout import (
    DRIVER_REPLACED_STATES,
    LIB_DIRS,
    NVML_SONAME,
    OPERATOR_DRIVER_ROOT,
    UPGRADE_STATE_LABEL,
)
from agent.ldcache import ARCH_FLAGS, LD_SO_CACHE, cache_entries
from agent.records import record
from checks.base import HostView, Outcome, failed, input_missing
from checks.operator.policy import OPERATOR_TOOLKIT_ROOT, OPERATOR_VALIDATIONS_DIR
from checks.policy import ResolvedPolicy

PROC_VERSION = "/proc/driver/nvidia/version"
PROC_UPTIME = "/proc/uptime"
DRIVER_CTR_READY = ".driver-ctr-ready"
DRIVER_READY = "driver-ready"
TOOLKIT_READY = "toolkit-ready"
# The markers the summaries name first, in the order the operator writes them; any other file
# in the directory (nvidia-fs-ready, workload-type, ...) is listed after them.
KNOWN_MARKERS = (DRIVER_CTR_READY, DRIVER_READY, TOOLKIT_READY, "cuda-ready", "plugin-ready")
MAX_MARKERS = 32  # the validator writes about a dozen; a longer listing is cut here
RUNTIME = "nvidia-container-runtime"
CTK = "nvidia-ctk"
VALIDATOR_SOURCE = (
    "NVIDIA/gpu-operator cmd/nvidia-validator/main.go (defaultStatusPath "
    "/run/nvidia/validations; .driver-ctr-ready, driver-ready, toolkit-ready markers)"
)

# What collect captures for these decisions, at the default locations (a configured
# driver_root, toolkit_root or validations_dir is read live but not captured).
DRIVER_PRESENCE: Tuple[str, ...] = tuple(
    f"{OPERATOR_DRIVER_ROOT}{d}/libnvidia-ml.so*" for d in LIB_DIRS
) + (f"{OPERATOR_VALIDATIONS_DIR}/*",)
# The driver root's loader cache: collect copies it byte for byte (agent/host/collect.py), and
# driver_discover names the library it points at as presence.
DRIVER_READS: Tuple[str, ...] = (f"{OPERATOR_DRIVER_ROOT}{LD_SO_CACHE}",)
# ldconfig writes one entry per soname and hwcap subdirectory; a hostile cache may repeat it
# up to agent/ldcache.py's entry bound, so only the first few are looked at.
MAX_CACHED_NVML = 8
TOOLKIT_PRESENCE: Tuple[str, ...] = (
    f"{OPERATOR_TOOLKIT_ROOT}/{RUNTIME}", f"{OPERATOR_TOOLKIT_ROOT}/{CTK}",
    f"{OPERATOR_VALIDATIONS_DIR}/*",
)
OPERATOR_CTK_ARGV = (f"{OPERATOR_TOOLKIT_ROOT}/{CTK}", "--version")


def driver_owned(policy: ResolvedPolicy) -> bool:
    """The operator installs the driver on this path (driver.managed_by_operator)."""
    return policy.policy.driver.managed_by_operator and policy.path.startswith("operator-")


def toolkit_owned(policy: ResolvedPolicy) -> bool:
    return policy.policy.toolkit.managed_by_operator and policy.path.startswith("operator-")


def markers(host: HostView, policy: ResolvedPolicy) -> List[str]:
    """The validator's marker files present, the known ones first."""
    directory = policy.policy.operator.validations_dir
    names = [n for n in host.listdir(directory) if host.is_file(f"{directory}/{n}")]
    known = [m for m in KNOWN_MARKERS if m in names]
    rest = sorted(n for n in names if n not in KNOWN_MARKERS and n.isprintable())
    return (known + rest)[:MAX_MARKERS]


def marker_text(found: List[str], policy: ResolvedPolicy) -> str:
    directory = policy.policy.operator.validations_dir
    if not found:
        return f"no validator markers in {directory}"
    return f"validator markers in {directory}: {', '.join(found)}"


def driver_ready_fields(host: HostView, policy: ResolvedPolicy) -> Dict[str, str]:
    """KEY=value lines of the validator's driver-ready file (empty when absent)."""
    text = host.read_text_or_none(f"{policy.policy.operator.validations_dir}/{DRIVER_READY}")
    fields: Dict[str, str] = {}
    for line in (text or "").splitlines()[:32]:
        key, sep, value = line.partition("=")
        if sep and key.strip().isidentifier():
            fields[key.strip()] = value.strip()[:200]
    return fields


def uptime_s(host: HostView) -> Optional[float]:
    text = host.read_text_or_none(PROC_UPTIME)
    try:
        return float(text.split()[0]) if text else None
    except (ValueError, IndexError):
        return None


def nvml_libs_under(host: HostView, root: str) -> List[str]:
    """libnvidia-ml files in ``root``'s library directories ("/" = the host's own); for a
    driver root, then the libnvidia-ml.so.1 its own ld.so.cache names, when it exists there."""
    prefix = "" if root in ("", "/") else root.rstrip("/")
    found: List[str] = []
    for lib_dir in LIB_DIRS:
        found += host.glob(f"{prefix}{lib_dir}/libnvidia-ml.so*")
    if not found and prefix:
        found = [p for p in cached_nvml(host, prefix) if host.exists(p)]
    return found


def _inside(path: str) -> bool:
    """An absolute, normalised path with no ``..``: joined to a root it names a path under it
    (its last component is then resolved by the Host inside its own root, never this one's
    parent)."""
    return (path.startswith("/") and "\0" not in path and len(path) < 4096
            and posixpath.normpath(path) == path and ".." not in path.split("/"))


def cached_nvml(host: HostView, prefix: str) -> List[str]:
    """``prefix`` + the path of each libnvidia-ml.so.1 entry in ``prefix``'s /etc/ld.so.cache
    (either 64-bit architecture: a bundle may be judged on another machine). The cache is
    read through the Host, bounded by its read cap; an unreadable or unknown cache is none."""
    try:
        data = host.read_bytes(f"{prefix}{LD_SO_CACHE}")
    except (OSError, ValueError):
        return []
    found: List[str] = []
    for machine in ARCH_FLAGS:
        for name, path in cache_entries(data, machine):
            if name == NVML_SONAME and _inside(path) and f"{prefix}{path}" not in found:
                found.append(f"{prefix}{path}")
                if len(found) >= MAX_CACHED_NVML:
                    return found
    return found


def driver_discover(host: HostView) -> Tuple[Sequence[str], Sequence[str]]:
    """collect's hook: the library the default driver root's cache names, as presence."""
    return (), cached_nvml(host, OPERATOR_DRIVER_ROOT)


@record(frozen=True)
class Waiting:
    """The operator's component is not on the host yet, and how long the host has waited."""

    component: str  # "driver" | "toolkit"
    missing: str  # what is absent, in words
    markers: List[str]
    uptime: Optional[float]
    grace: Optional[int]
    # The operator's upgrade-state label when it says the driver is being replaced on this
    # node: the driver is absent by design then, however long after boot.
    upgrade: Optional[str] = None

    @property
    def late(self) -> bool:
        return (self.upgrade is None and self.grace is not None and self.uptime is not None
                and self.uptime > self.grace)

    def details(self) -> Dict[str, Any]:
        return {"waiting_for": f"gpu-operator-{self.component}", "markers": self.markers,
                "uptime_s": None if self.uptime is None else int(self.uptime),
                "grace_period_s": self.grace, "driver_upgrade_state": self.upgrade}


def driver_upgrade_state(host: HostView) -> Optional[str]:
    """The Node's upgrade-state label when it is one of the states in which the operator's
    upgrade controller has the driver replaced (agent/driver_layout.py); None otherwise,
    also when the Node cannot be read (then the grace period decides, as without upgrades)."""
    node = host.fact("node")
    meta = node.get("metadata") if isinstance(node, dict) else None
    labels = meta.get("labels") if isinstance(meta, dict) else None
    state = labels.get(UPGRADE_STATE_LABEL) if isinstance(labels, dict) else None
    return state if isinstance(state, str) and state in DRIVER_REPLACED_STATES else None


def driver_waiting(host: HostView, policy: ResolvedPolicy) -> Optional[Waiting]:
    """None when the operator's driver is present: the kernel module loaded and libnvidia-ml
    under the driver root; else what is missing."""
    root = policy.policy.operator.driver_root
    missing = []
    if not host.exists(PROC_VERSION):
        missing.append(f"kernel module not loaded ({PROC_VERSION} absent)")
    if not nvml_libs_under(host, root):
        missing.append(f"no libnvidia-ml under {root}")
    if not missing:
        return None
    op = policy.policy.operator
    return Waiting("driver", "; ".join(missing), markers(host, policy), uptime_s(host),
                   op.grace_period_s, driver_upgrade_state(host))


def toolkit_waiting(host: HostView, policy: ResolvedPolicy) -> Optional[Waiting]:
    root = policy.policy.operator.toolkit_root
    if host.exists(f"{root}/{RUNTIME}"):
        return None
    op = policy.policy.operator
    return Waiting("toolkit", f"no {RUNTIME} in {root}", markers(host, policy),
                   uptime_s(host), op.grace_period_s)


def _when(w: Waiting) -> str:
    if w.upgrade is not None:
        return f"GPU Operator driver upgrade in progress: {UPGRADE_STATE_LABEL}={w.upgrade}"
    if w.uptime is None:
        return f"uptime unknown ({PROC_UPTIME} unreadable)"
    if w.grace is None:
        return f"up {int(w.uptime)}s, no grace period set"
    return f"up {int(w.uptime)}s of a {w.grace}s grace period"


def waiting_summary(w: Waiting, policy: ResolvedPolicy) -> str:
    return (f"waiting for the GPU Operator {w.component}: {w.missing}; "
            f"{marker_text(w.markers, policy)} ({_when(w)})")


def waiting_outcome(w: Waiting, policy: ResolvedPolicy, late_code: Optional[str]) -> Outcome:
    """skip (input-missing) while waiting; with ``late_code`` (the component's owner check),
    fail once the grace period since boot has passed."""
    if late_code is not None and w.late:
        return failed(
            f"the GPU Operator {w.component} is still not on the host {int(w.uptime or 0)}s "
            f"after boot (grace period {w.grace}s): {w.missing}; "
            f"{marker_text(w.markers, policy)}",
            code=late_code,
            **w.details(),
        )
    return input_missing(waiting_summary(w, policy), **w.details())
