"""driver-open-module: a GPU that needs NVIDIA's open GPU kernel modules has them loaded.

Blackwell and Grace Hopper GPUs run only on the open flavour (NVIDIA Technical Blog, "NVIDIA
Transitions Fully Towards Open-Source GPU Kernel Modules": "For cutting-edge platforms such as
NVIDIA Grace Hopper or NVIDIA Blackwell, you must use the open-source GPU kernel modules. The
proprietary drivers are unsupported on these platforms"). With the proprietary module the
module still loads (/proc/driver/nvidia/version names it) but such a GPU does not initialise:
the kernel log says "NVRM: The NVIDIA GPU <slot> (PCI ID: 10de:2901) installed in this system
requires use of the NVIDIA open kernel modules" and "RmInitAdapter failed", and NVML does not
list the GPU. So the GPUs are taken from both sources: NVML's product names and the PCI
inventory's device ids (policy.driver.require_open_module; checks/driver/policy.py).

The flavour is the loaded module's: "Open Kernel Module" on the NVRM line
(checks/driver/nvidia_version.py). Which GPUs need it is policy data, so version 1 (which
names none) never judges it, and the check arrived with policy version 2 (since_policy=2).
"""
from typing import Any, Dict, List, Mapping, Optional, Tuple

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
    not_applicable,
    passed,
)
from checks.driver.common import (
    PROC_VERSION,
    VERSION_UNREADABLE,
    nvidia_gpus_on_pci,
    version_or_outcome,
)
from checks.driver.policy import OpenModulePolicy
from checks.operator.state import driver_owned
from checks.policy import ResolvedPolicy

BLOG = ('NVIDIA Technical Blog, "NVIDIA Transitions Fully Towards Open-Source GPU Kernel '
        'Modules" (Grace Hopper and Blackwell: the open modules only)')
OPEN_MODULE_REQUIRED = "open-module-required"
FIX = ("Install the open flavour of the same driver branch (Ubuntu: nvidia-driver-<branch>-"
       "server-open or linux-modules-nvidia-<branch>-server-open-<kernel>; RHEL: the "
       "nvidia-driver:<branch>-open module stream; the .run installer: -m=kernel-open), remove "
       "the proprietary one, reboot, then re-run the check. A GPU Operator driver: set the "
       "ClusterPolicy's spec.driver.kernelModuleType to auto or open.")
MAX_NAMED = 8  # GPUs named in a summary; details carry them all


def _slot(bus_id: str) -> str:
    """NVML's 8-digit-domain bus id (00000000:1A:00.0) as udev's slot (0000:1a:00.0)."""
    return bus_id.strip().lower()[-12:]


def _hex4(value: Any) -> str:
    """A PCI id half as udev writes it ("10de", sysfs "0x10de"); anything else (host.json is
    input too) is "?", so a summary never carries an arbitrary string from a bundle."""
    text = str(value or "").strip().lower()[:8]
    text = text[2:] if text.startswith("0x") else text
    return text if len(text) == 4 and all(c in "0123456789abcdef" for c in text) else "?"


def _nvml_gpus(host: HostView) -> Optional[List[Mapping[str, Any]]]:
    """The GPUs NVML lists, or None when there is no usable snapshot (not captured, or
    NVML failed as a whole: nvml-responsive's finding)."""
    snap = host.gpus()
    if not isinstance(snap, Mapping) or snap.get("error"):
        return None
    gpus = snap.get("gpus")
    return [g for g in gpus if isinstance(g, Mapping)] if isinstance(gpus, list) else None


def _requiring(
    host: HostView, req: OpenModulePolicy
) -> Tuple[List[Dict[str, Any]], int, List[str]]:
    """(GPUs the policy holds to the open module, GPUs seen at all, sources read). Each GPU
    is keyed by its bus id, so one that PCI and NVML both show is one entry named by both."""
    found: Dict[str, Dict[str, Any]] = {}
    ids: Dict[str, str] = {}
    seen = 0
    sources = []
    pci = nvidia_gpus_on_pci(host.fact("pci_devices"))
    if pci is not None:
        sources.append("PCI")
        seen = len(pci)
        for dev in pci:
            pci_id = f"{_hex4(dev.get('vendor'))}:{_hex4(dev.get('device'))}"
            slot = str(dev.get("slot") or "?")[:16].lower()
            ids[slot] = pci_id
            if pci_id in req.pci_device_ids:
                found[slot] = {"slot": slot, "pci_id": pci_id, "name": None, "in_nvml": False}
    nvml = _nvml_gpus(host)
    if nvml is not None:
        sources.append("NVML")
        seen = max(seen, len(nvml))
        for gpu in nvml:
            name = gpu.get("name")
            bus = gpu.get("pci_bus_id")
            slot = _slot(bus) if isinstance(bus, str) else f"index {str(gpu.get('index'))[:8]}"
            if slot in found:
                found[slot]["in_nvml"] = True
            if not isinstance(name, str) or not req.names_product(name):
                continue
            entry = found.setdefault(slot, {"slot": slot, "pci_id": ids.get(slot), "name": None})
            entry.update(name=name[:80], in_nvml=True)
    return [found[k] for k in sorted(found)], seen, sources


def _label(gpu: Dict[str, Any]) -> str:
    what = ", ".join(str(v) for v in (gpu["pci_id"], gpu["name"]) if v)
    return f"{gpu['slot']} ({what})"


def _driver_open_module(host: HostView, policy: ResolvedPolicy) -> Outcome:
    req = policy.policy.driver.require_open_module
    if not req.products and not req.pci_device_ids:
        return not_applicable("policy.driver.require_open_module names no GPU")
    if driver_owned(policy) and not policy.policy.operator.judge_managed:
        return not_applicable(f"the GPU Operator installs the driver on the {policy.path} path")
    version, early = version_or_outcome(host, "kernel module flavour")
    if version is None:
        assert early is not None
        return early
    gpus, seen, sources = _requiring(host, req)
    details: Dict[str, Any] = {
        "flavor": version.flavor, "version": version.version,
        "gpus_requiring_open": gpus, "sources": sources,
    }
    module = f"{version.flavor} kernel module {version.version}"
    if version.flavor == "open":
        need = f"{len(gpus)} GPU(s) that require it" if gpus else "no GPU here requires it"
        return passed(f"{module} loaded; {need}", **details)
    if gpus:
        named = ", ".join(_label(g) for g in gpus[:MAX_NAMED])
        more = f" and {len(gpus) - MAX_NAMED} more" if len(gpus) > MAX_NAMED else ""
        hidden = sum(1 for g in gpus if not g["in_nvml"]) if "NVML" in sources else 0
        # The kernel log names each: "requires use of the NVIDIA open kernel modules".
        unseen = (f"; NVML lists {'none' if hidden == len(gpus) else hidden} of them: a GPU "
                  "the proprietary module cannot drive does not initialise") if hidden else ""
        return failed(
            f"{module} loaded; {len(gpus)} GPU(s) require NVIDIA's open kernel module "
            f"(policy.driver.require_open_module): {named}{more}{unseen}",
            FIX, code=OPEN_MODULE_REQUIRED, **details)
    if "PCI" not in sources and seen == 0:
        # The proprietary module hides exactly the GPUs this check looks for from NVML; without
        # the PCI inventory, "none here" would be a guess (a --host-root tree without /sys).
        return input_missing(f"{module} loaded; the PCI devices were not captured and NVML "
                             "lists no GPU: nothing to judge the GPUs by", **details)
    return passed(f"{module} loaded; none of the {seen} GPU(s) requires the open module "
                  f"(read from {' and '.join(sources)})", **details)


DRIVER_OPEN_MODULE = Check(
    id="driver-open-module",
    title="GPUs that need NVIDIA's open kernel module have it loaded",
    severity=Severity.CRITICAL,
    gates=ALL_PATHS,
    interval=Interval.SLOW,
    remediation=FIX,
    run=_driver_open_module,
    reads=(PROC_VERSION,),
    facts=("pci_devices",),
    uses_gpus=True,
    timeout_s=5.0,
    since_policy=2,
    failures=(
        Failure(
            OPEN_MODULE_REQUIRED, Status.FAIL,
            "the proprietary kernel module is loaded on a host with a GPU that requires the "
            "open one (policy.driver.require_open_module: Blackwell, Grace Hopper)",
            FIX, BLOG + "; device ids: pci.ids (pciutils/pciids)",
        ),
        Failure(
            VERSION_UNREADABLE, Status.UNKNOWN,
            f"{PROC_VERSION} names no NVIDIA driver (no NVRM line), so the module's flavour is "
            "unknown",
            f"Check that the data center driver is the one loaded (`cat {PROC_VERSION}`).",
            "NVIDIA kernel module's /proc/driver/nvidia/version (open and proprietary "
            "flavours: tests/fixtures/PROVENANCE.md)",
        ),
    ),
)
