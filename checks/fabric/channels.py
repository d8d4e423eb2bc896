"""The IMEX channel nodes (checks/fabric/imex.py reads them): /dev/nvidia-caps-imex-channels/
channel<N> char devices (NVIDIA IMEX guide, "IMEX Channels"), held against the major the driver
registered for nvidia-caps-imex-channels in /proc/devices (proc(5): "Character devices:") and
minor N. The nodes come from the `dev_nodes` fact; both are hostile input.
"""
import re
from typing import List, Mapping, Optional, Tuple

from checks.base import HostView

# ASCII digits, bounded: `\d` and str.isdigit also take "²" and "١", which int() refuses or
# reads, and int() refuses more than 4,300 digits (Python >= 3.11).
CHANNEL = re.compile(r"/dev/nvidia-caps-imex-channels/channel([0-9]{1,10})")
_MAJOR = re.compile(r"[0-9]{1,10}")
CHANNEL_DEVICE = "nvidia-caps-imex-channels"
PROC_DEVICES = "/proc/devices"

def channel_major(proc_devices: Optional[str]) -> Optional[int]:
    """The char major of nvidia-caps-imex-channels in /proc/devices ("234 name" lines under
    "Character devices:", proc(5)); None when the file or the entry is absent."""
    char = False
    for line in (proc_devices or "").splitlines():
        if line.strip().endswith("devices:"):
            char = line.strip() == "Character devices:"
            continue
        parts = line.split()
        if char and len(parts) == 2 and parts[1] == CHANNEL_DEVICE and _MAJOR.fullmatch(parts[0]):
            return int(parts[0])
    return None


def read_channels(host: HostView) -> Tuple[Optional[List[str]], List[str]]:
    """(channel nodes as "channelN major:minor", None when dev_nodes is not captured; the nodes
    whose major or minor is wrong)."""
    nodes = host.fact("dev_nodes")
    if not isinstance(nodes, list):
        return None, []
    proc = host.read_text_or_none(PROC_DEVICES)
    major = channel_major(proc)
    found, wrong = [], []
    for node in nodes:
        path = node.get("path") if isinstance(node, Mapping) else None
        m = CHANNEL.fullmatch(path) if isinstance(path, str) else None
        if m is None:
            continue
        nmaj, nmin = node.get("major"), node.get("minor")
        found.append(f"channel{m.group(1)} {nmaj}:{nmin}")
        if nmin != int(m.group(1)):
            wrong.append(f"{path} has minor {nmin}, not {m.group(1)}")
        elif proc is not None and major is None:
            wrong.append(f"{path} exists but {PROC_DEVICES} lists no {CHANNEL_DEVICE}")
        elif major is not None and nmaj != major:
            wrong.append(f"{path} has major {nmaj}, {PROC_DEVICES} says {major}")
    return found, wrong
