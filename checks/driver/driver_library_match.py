"""driver-library-match: the loaded kernel module's version matches userspace libnvidia-ml."""
import re
from typing import Any, Dict, Tuple

from agent.driver_layout import LIB_DIRS
from checks.base import (
    ALL_PATHS,
    Check,
    Failure,
    HostView,
    Interval,
    Outcome,
    Severity,
    Status,
    failed,
    input_missing,
    passed,
)
from checks.driver.common import PROC_VERSION, VERSION_UNREADABLE, version_or_outcome
from checks.operator.state import (
    DRIVER_PRESENCE,
    DRIVER_READS,
    driver_discover,
    driver_owned,
    driver_waiting,
    waiting_outcome,
)
from checks.policy import ResolvedPolicy

_LIB_VERSION = re.compile(r"libnvidia-ml\.so\.(\d+\.\d+(?:\.\d+)?)$")
_SMI_MISMATCH = re.compile(r"NVML library version:\s*(\d+\.\d+(?:\.\d+)?)")
SMI_ARGV = ("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader")
# NVML's NVML_ERROR_LIB_RM_VERSION_MISMATCH (18), nvidia-smi's "Failed to initialize NVML:
# Driver/library version mismatch" (nvml.h).
NVML_MISMATCH = (
    'nvml.h: NVML_ERROR_LIB_RM_VERSION_MISMATCH (18), "Driver/library version mismatch"'
)


def _version_key(version: str) -> Tuple[int, ...]:
    # Driver versions are dotted decimals (_LIB_VERSION): 580.95.05, 580.105.08, 535.288.
    return tuple(int(part) for part in version.split("."))


def userspace_nvml_versions(host: HostView, root: str = "/") -> Dict[str, str]:
    """libnvidia-ml version per library directory under ``root`` (the host's own "/", or the
    GPU Operator's driver root), from the soname link the loader uses
    (libnvidia-ml.so.1 -> libnvidia-ml.so.<version>), else from the versioned file."""
    found: Dict[str, str] = {}
    prefix = "" if root == "/" else root.rstrip("/")
    for lib_dir in (prefix + d for d in LIB_DIRS):
        target = host.readlink(f"{lib_dir}/libnvidia-ml.so.1")
        m = _LIB_VERSION.search(target) if target else None
        if m:
            found[lib_dir] = m.group(1)
            continue
        versioned = [
            mm.group(1)
            for path in host.glob(f"{lib_dir}/libnvidia-ml.so.*")
            if (mm := _LIB_VERSION.search(path))
        ]
        if versioned:
            # Newest by number, not by string: "580.105.08" is newer than "580.95.05".
            found[lib_dir] = max(versioned, key=_version_key)
    return found


def _operator_match(host: HostView, policy: ResolvedPolicy) -> Outcome:
    """The loaded module against the libnvidia-ml the GPU Operator's driver container ships
    under its root (the host's own directories hold none, and the host has no nvidia-smi)."""
    waiting = driver_waiting(host, policy)
    if waiting is not None:
        return waiting_outcome(waiting, policy, None)  # driver-loaded owns the wait
    version, early = version_or_outcome(host, "kernel module version")
    if version is None:
        assert early is not None
        return early
    root = policy.policy.operator.driver_root
    libs = userspace_nvml_versions(host, root)
    details: Dict[str, Any] = {"kernel_module": version.version, "libnvidia_ml": libs,
                               "driver_root": root}
    mismatched = {d: v for d, v in libs.items() if v != version.version}
    if mismatched:
        where = ", ".join(f"{v} in {d}" for d, v in sorted(mismatched.items()))
        return failed(
            f"Driver/library version mismatch: kernel module {version.version}, the GPU "
            f"Operator driver's libnvidia-ml {where}",
            "The loaded module is not the one the GPU Operator's driver container ships (a "
            "module from a host install or an earlier driver container is still loaded): "
            "drain the node and reboot, so the driver container loads its own module.",
            code="library-mismatch",
            **details,
        )
    if not libs:  # a libnvidia-ml.so* name without a version: nothing to compare
        return input_missing(f"no versioned libnvidia-ml under {root}; nothing to compare",
                             **details)
    return passed(f"kernel module and the GPU Operator driver's libnvidia-ml (under {root}) "
                  f"are both {version.version}", **details)


def _driver_library_match(host: HostView, policy: ResolvedPolicy) -> Outcome:
    if driver_owned(policy) and policy.policy.operator.judge_managed:
        return _operator_match(host, policy)
    version, early = version_or_outcome(host, "kernel module version")
    if version is None:
        assert early is not None
        return early
    libs = userspace_nvml_versions(host)
    smi = host.run(list(SMI_ARGV), timeout=10)
    smi_text = smi.stdout + smi.stderr
    smi_lib = _SMI_MISMATCH.search(smi_text)
    details: Dict[str, Any] = {"kernel_module": version.version, "libnvidia_ml": libs}
    mismatched = {d: v for d, v in libs.items() if v != version.version}
    if smi_lib and smi_lib.group(1) != version.version:
        mismatched.setdefault("nvidia-smi", smi_lib.group(1))
    if mismatched:
        where = ", ".join(f"{v} in {d}" for d, v in sorted(mismatched.items()))
        return failed(
            f"Driver/library version mismatch: kernel module {version.version}, "
            f"userspace libnvidia-ml {where}",
            code="library-mismatch",
            **details,
        )
    if not libs and not smi_lib:
        # nvml-responsive owns "library not found"; this check's own input is absent.
        return input_missing(
            "libnvidia-ml not found (in " + ", ".join(LIB_DIRS) + "); nothing to compare",
            **details,
        )
    return passed(f"kernel module and libnvidia-ml are both {version.version}", **details)


DRIVER_LIBRARY_MATCH = Check(
    id="driver-library-match",
    title="Kernel module version matches the userspace libnvidia-ml",
    severity=Severity.CRITICAL,
    gates=ALL_PATHS,
    interval=Interval.SLOW,
    remediation="Reboot (or reload the nvidia modules) so the kernel module matches userspace.",
    run=_driver_library_match,
    facts=("node",),  # the GPU Operator's upgrade state (checks/operator/state.py)
    reads=(PROC_VERSION,) + DRIVER_READS,
    presence=tuple(f"{d}/libnvidia-ml.so*" for d in LIB_DIRS) + DRIVER_PRESENCE,
    discover=driver_discover,
    runs=(SMI_ARGV,),
    timeout_s=15.0,
    failures=(
        Failure(
            VERSION_UNREADABLE, Status.UNKNOWN,
            f"{PROC_VERSION} names no NVIDIA driver version to compare",
            "Check that the data center driver is the one loaded (`cat "
            f"{PROC_VERSION}`); Jetson/L4T boards are not supported hosts.",
            "NVIDIA kernel module's /proc/driver/nvidia/version (open and proprietary "
            "flavours: tests/fixtures/PROVENANCE.md)",
        ),
        Failure(
            "library-mismatch", Status.FAIL,
            "the loaded kernel module and the userspace libnvidia-ml have different versions",
            "The driver packages were upgraded without reloading the module: drain the node "
            "and reboot (or unload and reload the nvidia modules) so the kernel module matches "
            "the userspace libraries; pin the driver packages if the upgrade was unintended.",
            NVML_MISMATCH,
        ),
    ),
)
