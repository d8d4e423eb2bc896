"""gpu-count: GPUs on PCI == GPUs NVML sees (== expected_gpus), and none of them lost.

gpu-count owns lost GPUs (docs/gpu-snapshot.md, "How the GPU checks read it"): a GPU NVML
lists with a GPU-level `error` (`gpu_lost`, NVML_ERROR_GPU_IS_LOST in nvml.h: the GPU fell
off the bus, XID 79 in NVIDIA's "XID Errors") fails here, once, naming its PCI slot.
"""
from typing import Any, Dict, List, Optional

from agent.snapshot import GpuSnapshot
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
    passed,
    warned,
)
from checks.driver.common import nvidia_gpus_on_pci
from checks.gpu.common import (
    NVML_REQUIRES,
    SNAPSHOT_DOC,
    gpu_check,
    gpu_label,
    gpu_ref,
    malformed,
    snapshot_failures,
)
from checks.gpu.readers import SnapshotError, kind_of, opt_int, text
from checks.policy import ResolvedPolicy

GPU_NOT_USABLE = "gpu-not-usable"
PCI_NVML_MISMATCH = "pci-nvml-mismatch"
COUNT_NOT_EXPECTED = "count-not-expected"
NO_GPU = "no-gpu"
PCI_UNAVAILABLE = "pci-unavailable"

FIX = ("A GPU on PCI that NVML cannot use has usually fallen off the bus (XID 79) or failed to "
       "initialise: check `dmesg`, drain the node, reseat or replace the GPU and reboot. If the "
       "count is right, correct expected_gpus in the config.")
XID_SOURCE = "NVIDIA XID Errors (XID 79: GPU has fallen off the bus); nvml.h nvmlDeviceGetCount"


def _slotless(pci: Optional[List[Dict[str, Any]]]) -> Optional[str]:
    """Why the PCI inventory is unusable (an NVIDIA GPU entry whose "slot" is not a
    non-empty string), or None when every entry has one."""
    for d in pci or []:
        slot = d.get("slot")
        if not isinstance(slot, str) or not slot:
            what = "missing" if "slot" not in d else ("empty" if slot == "" else kind_of(slot))
            return f"pci_devices: an NVIDIA GPU entry's slot is {what}"
    return None


def _at_fault(lost: List[Any], missing: List[str], pci: Optional[List[Any]], nvml_count: int,
              expected: Optional[int]) -> List[Dict[str, Any]]:
    """The GPUs a failure names when they explain it whole: each lost GPU, and each PCI slot
    NVML does not count ({"pci_bus_id": slot}); [] when the counts are not explained by them
    (NVML sees more than PCI, or expected_gpus is another number) or it is ambiguous which
    unreadable slot is the lost GPU's."""
    refs = [gpu_ref(g) for g in lost]
    absent_n = 0 if pci is None else len(pci) - nvml_count
    lost_slots = {str(g.get("pci_bus_id") or "").lower()[-12:] for g in lost}
    absent: List[str] = []
    if absent_n < 0 or any(r is None for r in refs):
        return []
    if absent_n and not lost:
        absent = list(missing)
    elif absent_n:
        if "" in lost_slots:  # a lost GPU without its slot: which missing slot is it?
            return []
        absent = [s for s in missing if s.lower()[-12:] not in lost_slots]
    if len(absent) != absent_n or (expected is not None and expected != nvml_count + absent_n):
        return []
    return [r for r in refs if r is not None] + [{"pci_bus_id": s} for s in absent]


def _gpu_count(host: HostView, policy: ResolvedPolicy, snap: GpuSnapshot) -> Outcome:
    gpus = snap.get("gpus") or []
    try:
        reported = opt_int(snap, "device_count", "")
    except SnapshotError as exc:
        return malformed(exc)
    nvml_count = len(gpus) if reported is None else reported
    lost = [g for g in gpus if g.get("error")]
    usable = nvml_count - len(lost)
    pci = nvidia_gpus_on_pci(host.fact("pci_devices"))
    # Host facts are untrusted input: an NVIDIA GPU entry without a slot string cannot be
    # matched to NVML's pci_bus_id, so the inventory is malformed and not used (as if absent:
    # pci-unavailable), never guessed and never a KeyError.
    pci_malformed = _slotless(pci)
    if pci_malformed is not None:
        pci = None
    expected = policy.setting("expected_gpus")
    details: Dict[str, Any] = {
        "nvml": nvml_count, "usable": usable, "pci": None if pci is None else len(pci),
        "expected": expected, "lost": [g.get("index") for g in lost],
    }
    if pci_malformed is not None:
        details["pci_malformed"] = pci_malformed
    problems: List[str] = []
    codes: List[str] = []
    # NVML's "00000000:1A:00.0" vs udev's "0000:1a:00.0": compare domain:bus:dev.fn, lowercase.
    readable = {str(g.get("pci_bus_id") or "").lower()[-12:] for g in gpus if not g.get("error")}
    missing = [str(d["slot"]) for d in pci or [] if str(d["slot"]).lower()[-12:] not in readable]
    for gpu in lost:
        err: Any = gpu.get("error")
        problems.append(f"{gpu_label(gpu)} not usable: {text(err.get('kind'))} "
                        f"({text(err.get('message'), 200)})")
        codes.append(GPU_NOT_USABLE)
    if lost and pci is not None and len(missing) == len(lost):
        problems[-1] += f"; PCI {', '.join(missing)} unreadable in NVML"
    if pci is not None and len(pci) != nvml_count:
        problems.append(
            f"{len(pci)} NVIDIA GPU(s) on PCI but NVML sees {nvml_count}"
            + (f" (not in NVML: {', '.join(missing)})"
               if missing and len(missing) < len(pci) else ""))
        codes.append(PCI_NVML_MISMATCH)
        details["pci_not_in_nvml"] = missing
    if expected is not None and usable != expected:
        problems.append(f"{usable} usable GPU(s), config expects {expected}")
        codes.append(COUNT_NOT_EXPECTED)
    if problems:
        refs = _at_fault(lost, missing, pci, nvml_count, expected)
        if refs:  # agent/gpu_health.py counts these GPUs unhealthy
            details["gpus_at_fault"] = refs
        return failed("; ".join(problems), code=codes[0], **details)
    if nvml_count == 0:
        return failed("no NVIDIA GPU: NVML sees 0 and none on PCI", code=NO_GPU, **details)
    if pci is None and expected is None:
        why = "not available" if pci_malformed is None else f"malformed ({pci_malformed})"
        return warned(
            f"NVML sees {nvml_count} GPU(s); PCI inventory {why} to cross-check "
            "(set expected_gpus to pin the count)",
            code=PCI_UNAVAILABLE, **details,
        )
    seen = (f"{nvml_count} GPU(s) on PCI and in NVML" if pci is not None
            else f"NVML sees {nvml_count} GPU(s)")
    return passed(seen + (f", as expected ({expected})" if expected is not None else ""), **details)


GPU_COUNT = Check(
    id="gpu-count",
    title="GPUs on PCI == GPUs NVML sees (== expected_gpus)",
    severity=Severity.CRITICAL,
    gates=ALL_PATHS,
    interval=Interval.FAST,
    remediation="Find the missing GPU (dmesg, XID 79), drain, reseat or replace it, reboot.",
    run=gpu_check(_gpu_count),
    facts=("pci_devices",),
    uses_gpus=True,
    requires=NVML_REQUIRES,
    timeout_s=10.0,
    failures=(
        Failure(GPU_NOT_USABLE, Status.FAIL,
                "a GPU NVML lists is unusable (gpu_lost or no handle): the summary names it "
                "and its PCI slot", FIX, XID_SOURCE),
        Failure(PCI_NVML_MISMATCH, Status.FAIL,
                "the NVIDIA GPUs on PCI and the GPUs NVML counts differ", FIX, XID_SOURCE),
        Failure(COUNT_NOT_EXPECTED, Status.FAIL,
                "the usable GPUs differ from expected_gpus in the config", FIX,
                "docs/config.md (expected_gpus)"),
        Failure(NO_GPU, Status.FAIL, "NVML sees no GPU and PCI shows none",
                "Find the missing GPU (dmesg, XID 79), drain, reseat or replace it, reboot.",
                XID_SOURCE),
        Failure(PCI_UNAVAILABLE, Status.WARN,
                "no PCI inventory to cross-check NVML's count and expected_gpus unset",
                "Set expected_gpus in the config to pin the GPU count.", SNAPSHOT_DOC),
    ) + snapshot_failures(reads_fields=False),
)
