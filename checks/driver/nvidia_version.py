"""Parse /proc/driver/nvidia/version, in both kernel-module flavours.

Proprietary: "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.173.02  Tue Jun 23 ..."
Open:        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  565.57.01  Release Build ..."
The version is the first version-like token on the NVRM line; the word after "Module" is
"for" in the open flavour, so position-based parsing breaks (tests/fixtures/PROVENANCE.md).
Jetson/L4T boards print the L4T release (e.g. 35.3.1), which is not a driver branch.
"""
import re
from typing import Optional, Tuple, Union

from agent.records import record

_NVRM_LINE = re.compile(r"^NVRM version:(.*)$", re.MULTILINE)
_DRIVER_VERSION = re.compile(r"(?<![\w.])(\d{2,4})\.(\d{1,3})(?:\.(\d{1,3}))?(?![\w.])")
# Data center driver branches are three-digit (R418 .. R580+); L4T releases are two-digit.
MIN_DESKTOP_BRANCH = 100


@record(frozen=True)
class DriverVersion:
    version: str
    branch: int
    parts: Tuple[int, ...]
    flavor: str  # "open" | "proprietary"
    arch: Optional[str]


@record(frozen=True)
class Unparsable:
    reason: str


def parse_proc_version(text: str) -> Union[DriverVersion, Unparsable]:
    m = _NVRM_LINE.search(text)
    if not m:
        return Unparsable("no 'NVRM version:' line in /proc/driver/nvidia/version")
    line = m.group(1)
    v = _DRIVER_VERSION.search(line)
    if not v:
        return Unparsable(f"no driver version on the NVRM line: {line.strip()[:80]!r}")
    parts = tuple(int(p) for p in v.groups() if p is not None)
    flavor = "open" if "Open Kernel Module" in line else "proprietary"
    arch_m = re.search(r"\b(x86_64|aarch64|ppc64le)\b", line)
    arch = arch_m.group(1) if arch_m else None
    if parts[0] < MIN_DESKTOP_BRANCH:
        return Unparsable(
            f"version {v.group(0)} is not an NVIDIA driver branch (a Jetson/L4T release?)"
        )
    return DriverVersion(v.group(0), parts[0], parts, flavor, arch)
