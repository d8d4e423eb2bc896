"""Facts derivable from files in a directory tree: the NVIDIA device nodes under dev/ and the
NVIDIA PCI functions under sys/bus/pci/devices. A bare tree (--host-root) has only these
(TreeFacts); the live machine reads the same files with the root "/" when udev is unusable
(agent/host/live.py)."""
import os
import stat
from typing import Any, Dict, List, Optional

from agent.safeio.bounded import read_text_capped

NVIDIA_PCI_VENDOR = "10de"
SYSFS_ATTR_CAP = 4096  # a sysfs attribute is at most one page (Documentation/filesystems/sysfs.rst)


# Nodes read from one /dev/nvidia* directory: IMEX channels go up to the driver's
# NVreg_ImexChannelCount, 2048 by default (NVIDIA IMEX guide, "IMEX Channels").
DEV_DIR_CAP = 4096


def dev_nodes(root: str = "/") -> List[Dict[str, Any]]:
    """NVIDIA character device nodes (/dev/nvidia*) with their major/minor numbers, and those
    one level down in /dev/nvidia* directories (/dev/nvidia-caps/nvidia-capN,
    /dev/nvidia-caps-imex-channels/channelN)."""
    base = os.path.join(root, "dev")
    nodes: List[Dict[str, Any]] = []
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
            nodes.append({"path": f"/dev/{name}", "major": os.major(st.st_rdev),
                          "minor": os.minor(st.st_rdev)})
        elif stat.S_ISDIR(st.st_mode) and not os.path.islink(os.path.join(base, name)):
            # not through a link: under --host-root it could name a directory outside the tree
            nodes += _dir_nodes(os.path.join(base, name), f"/dev/{name}")
    return nodes


def _dir_nodes(directory: str, shown: str) -> List[Dict[str, Any]]:
    try:
        names = sorted(os.listdir(directory))[:DEV_DIR_CAP]
    except OSError:
        return []
    found = []
    for name in names:
        try:
            st = os.lstat(os.path.join(directory, name))
        except OSError:
            continue
        if stat.S_ISCHR(st.st_mode):
            found.append({"path": f"{shown}/{name}", "major": os.major(st.st_rdev),
                          "minor": os.minor(st.st_rdev)})
    return found


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
