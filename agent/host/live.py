"""Facts only the running machine has: udev's view of the PCI bus, the kernel's NTP state
(adjtimex), the daemon's sticky faults. Only the composition root (agent/host/build.py) hands
LiveFacts to a Host, and only for root "/". Commands run through agent/safeio/commands.py; facts
a bare tree also has (sysfs, /dev) are read by agent/host/tree.py, here with the root "/"."""
import ctypes
import ctypes.util
from typing import Any, Dict, List, Optional

from agent.host.tree import NVIDIA_PCI_VENDOR, dev_nodes, pci_devices_sysfs


def pci_devices_udev() -> Optional[List[Dict[str, Any]]]:
    """NVIDIA PCI functions as udev reports them (pyudev); None when udev is unusable."""
    try:
        import pyudev
    except ImportError:
        return None
    try:
        context = pyudev.Context()
        found = []
        for dev in context.list_devices(subsystem="pci"):
            props = dev.properties
            pci_id = props.get("PCI_ID", "")
            vendor = pci_id.split(":")[0].lower() if pci_id else ""
            if vendor != NVIDIA_PCI_VENDOR:
                continue
            found.append(
                {
                    "slot": props.get("PCI_SLOT_NAME", dev.sys_name),
                    "vendor": vendor,
                    "device": pci_id.split(":")[1].lower() if ":" in pci_id else "",
                    "class": props.get("PCI_CLASS", "").lower().rjust(6, "0"),
                    "driver": props.get("DRIVER") or dev.driver,
                }
            )
        return sorted(found, key=lambda d: d["slot"])
    except Exception:  # libudev missing or no /sys: fall back to plain sysfs reads
        return None


class _Timex(ctypes.Structure):
    # struct timex from <sys/timex.h> (glibc, LP64): int-sized fields are padded to long.
    _fields_ = [
        ("modes", ctypes.c_uint), ("offset", ctypes.c_long), ("freq", ctypes.c_long),
        ("maxerror", ctypes.c_long), ("esterror", ctypes.c_long), ("status", ctypes.c_int),
        ("constant", ctypes.c_long), ("precision", ctypes.c_long), ("tolerance", ctypes.c_long),
        ("time_sec", ctypes.c_long), ("time_usec", ctypes.c_long), ("tick", ctypes.c_long),
        ("ppsfreq", ctypes.c_long), ("jitter", ctypes.c_long), ("shift", ctypes.c_int),
        ("stabil", ctypes.c_long), ("jitcnt", ctypes.c_long), ("calcnt", ctypes.c_long),
        ("errcnt", ctypes.c_long), ("stbcnt", ctypes.c_long), ("tai", ctypes.c_int),
        ("_reserved", ctypes.c_int * 11),
    ]


def adjtimex() -> Optional[Dict[str, Any]]:
    """The kernel's NTP state, read-only (modes = 0 changes nothing; no CAP_SYS_TIME needed)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        tx = _Timex()
        state = libc.adjtimex(ctypes.byref(tx))
    except (OSError, AttributeError):
        return None
    if state < 0:
        return None
    STA_NANO = 0x2000
    return {
        "state": state,  # TIME_OK=0 .. TIME_ERROR=5
        "status": tx.status,
        "maxerror_us": tx.maxerror,
        "esterror_us": tx.esterror,
        "offset_ns": tx.offset if tx.status & STA_NANO else tx.offset * 1000,
    }


class LiveFacts:
    """Facts read from the running machine (root "/")."""

    def __init__(self, sticky_path: Optional[str] = None) -> None:
        self._sticky_path = sticky_path

    def fact(self, name: str) -> Any:
        if name == "pci_devices":
            udev = pci_devices_udev()
            return udev if udev is not None else pci_devices_sysfs("/")
        if name == "dev_nodes":
            return dev_nodes("/")
        if name == "adjtimex":
            return adjtimex()
        if name == "sticky" and self._sticky_path:  # the daemon's sticky faults (docs/xid.md)
            from agent.xid.state import read_state_file

            return read_state_file(self._sticky_path)
        return None  # node: the kube client (needs the API)
