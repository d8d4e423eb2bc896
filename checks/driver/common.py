"""What the driver family shares: the loaded module's version file and the PCI GPU filter."""
from typing import Any, Dict, List, Optional, Tuple

from checks.base import HostView, Outcome, needs, unknown
from checks.driver.nvidia_version import DriverVersion, Unparsable, parse_proc_version

PROC_VERSION = "/proc/driver/nvidia/version"
# PCI base class 03 (display): 0300 VGA-compatible, 0302 3D controller (data center GPUs).
GPU_PCI_CLASSES = ("0300", "0302")
# The failure code both driver-branch and driver-library-match declare for a version file
# that is there but does not name a driver branch (a Jetson/L4T board, a truncated file).
VERSION_UNREADABLE = "version-unreadable"


def read_driver_version(host: HostView) -> Tuple[Optional[DriverVersion], str]:
    """The loaded kernel module's version, or None with the reason."""
    text = host.read_text_or_none(PROC_VERSION)
    if text is None:
        return None, f"{PROC_VERSION} absent: the NVIDIA kernel module is not loaded"
    parsed = parse_proc_version(text)
    if isinstance(parsed, Unparsable):
        return None, parsed.reason
    return parsed, ""


def version_or_outcome(
    host: HostView, what: str
) -> Tuple[Optional[DriverVersion], Optional[Outcome]]:
    """The module version, or the outcome when there is none. Only the version file is
    needed: missing /dev nodes (nvidia-persistenced or nvidia-modprobe not run yet) are
    driver-loaded's finding and must not hide a too-old branch (kubeadm preflight reports
    every problem in one run). No version file at all is driver-loaded's failure to own."""
    if not host.exists(PROC_VERSION):
        return None, needs(
            "driver-loaded", f"needs driver-loaded ({PROC_VERSION} absent: module not loaded)"
        )
    version, why = read_driver_version(host)
    if version is None:
        return None, unknown(f"cannot read the {what}: {why}", code=VERSION_UNREADABLE)
    return version, None


def nvidia_gpus_on_pci(pci: Optional[List[Dict[str, Any]]]) -> Optional[List[Dict[str, Any]]]:
    if not isinstance(pci, list):
        return None  # absent or malformed: unknown, never guessed
    return [
        d
        for d in pci
        if isinstance(d, dict) and str(d.get("class", "")).rjust(6, "0")[:4] in GPU_PCI_CLASSES
    ]
