"""Sources that read the real machine. Only the composition root (agent.cli) and collect
hand these to a Host, and only for root "/" (or, for file-derived facts, a --host-root tree)."""
import ctypes
import ctypes.util
import os
import stat
import subprocess
from typing import Any, Dict, List, Optional, Sequence

from agent.host.seam import CommandResult
from agent.safeio.bounded import read_text_capped

NVIDIA_PCI_VENDOR = "10de"
SYSFS_ATTR_CAP = 4096  # a sysfs attribute is at most one page (Documentation/filesystems/sysfs.rst)


class SubprocessCommands:
    """Runs argv lists (never a shell) with a timeout; a missing binary is rc 127."""

    def run(self, argv: Sequence[str], timeout: float) -> CommandResult:
        args = tuple(argv)
        try:
            proc = subprocess.run(
                list(args),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=timeout,
                check=False,
                env={**os.environ, "LC_ALL": "C"},
            )
        except FileNotFoundError:
            return CommandResult(args, 127, "", f"{args[0]}: command not found")
        except PermissionError as exc:
            return CommandResult(args, 126, "", str(exc))
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode("utf-8", "replace") if exc.stdout else ""
            return CommandResult(args, -9, out, f"timed out after {timeout:g}s", timed_out=True)
        return CommandResult(
            args,
            proc.returncode,
            proc.stdout.decode("utf-8", "replace"),
            proc.stderr.decode("utf-8", "replace"),
        )


def dev_nodes(root: str = "/") -> List[Dict[str, Any]]:
    """NVIDIA character device nodes (/dev/nvidia*) with their major/minor numbers."""
    base = os.path.join(root, "dev")
    nodes = []
    try:
        names = sorted(n for n in os.listdir(base) if n.startswith("nvidia"))
    except OSError:
        return []
    for name in names:
        try:
            st = os.stat(os.path.join(base, name))
        except OSError:
            continue
        if stat.S_ISCHR(st.st_mode):
            nodes.append(
                {
                    "path": f"/dev/{name}",
                    "major": os.major(st.st_rdev),
                    "minor": os.minor(st.st_rdev),
                }
            )
    return nodes


def pci_devices_sysfs(root: str = "/") -> List[Dict[str, Any]]:
    """NVIDIA PCI functions from sysfs files (a --host-root tree, or udev unavailable)."""
    base = os.path.join(root, "sys/bus/pci/devices")
    found = []
    try:
        slots = sorted(os.listdir(base))
    except OSError:
        return []
    for slot in slots:
        def attr(name: str, slot: str = slot) -> Optional[str]:
            # sysfs attributes are one line; the bounded reader reads them page by page.
            try:
                return read_text_capped(os.path.join(base, slot, name), SYSFS_ATTR_CAP).strip()
            except OSError:
                return None

        vendor = (attr("vendor") or "").lower().replace("0x", "")
        if vendor != NVIDIA_PCI_VENDOR:
            continue
        driver_link = os.path.join(base, slot, "driver")
        driver = os.path.basename(os.readlink(driver_link)) if os.path.islink(driver_link) else None
        found.append(
            {
                "slot": slot,
                "vendor": vendor,
                "device": (attr("device") or "").lower().replace("0x", ""),
                "class": (attr("class") or "").lower().replace("0x", ""),
                "driver": driver,
            }
        )
    return found


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


class TreeFacts:
    """Facts derivable from files in a bare tree (--host-root): sysfs and /dev only."""

    def __init__(self, root: str) -> None:
        self._root = root

    def fact(self, name: str) -> Any:
        if name == "pci_devices":
            if not os.path.isdir(os.path.join(self._root, "sys/bus/pci/devices")):
                return None
            return pci_devices_sysfs(self._root)
        if name == "dev_nodes":
            if not os.path.isdir(os.path.join(self._root, "dev")):
                return None
            return dev_nodes(self._root)
        return None
