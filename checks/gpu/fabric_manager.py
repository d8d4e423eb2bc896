"""fabric-manager: on NVSwitch systems, the fabric manager runs and every GPU joined the fabric.

An HGX/DGX board's GPUs talk over NVSwitches; until nvidia-fabricmanager has programmed
the switches and the GPUs registered (NVML fabric state COMPLETED, status SUCCESS), CUDA
initialisation fails on them (NVIDIA Fabric Manager User Guide, "GPU fabric registration").

Whether a host is on a fabric is judged from two kinds of evidence together:

- PCI: an NVSwitch function on the host's own PCI bus (class 0x0680, policy
  `gpu.fabric.nvswitch_pci_classes`) is an HGX/DGX baseboard, whose switches this host's
  nvidia-fabricmanager programs: the service must run and every GPU must have joined;
- NVML: a GPU that reports a fabric state other than not_supported is on a fabric even with
  no NVSwitch on PCI: a GB200-class compute tray, whose NVLink switches sit in the rack's switch
  trays and are managed from there (NVIDIA Multi-Node NVLink Systems User Guide, "Overview";
  the NVL72 reference architecture's "Global Fabric Manager"): its GPUs must have joined, and
  the host's own nvidia-fabricmanager is not asked for.

Neither (no NVSwitch on PCI; NVML answers not_supported, or has no fabric call at all,
function_not_found, as drivers before nvmlDeviceGetGpuFabricInfo do): not an NVSwitch system,
not applicable. A PCIe host on an older driver is such a host, not an unknown one.
"""
from typing import Dict, List, Mapping, Optional, Tuple

from agent.snapshot import FabricRecord, GpuRecord, GpuSnapshot
from checks.base import (
    ALL_PATHS,
    Check,
    Failure,
    HostView,
    Interval,
    Outcome,
    Severity,
    Status,
    not_applicable,
    skipped,
)
from checks.gpu.common import (
    NVML_REQUIRES,
    Findings,
    each_field,
    gpu_check,
    gpu_label,
    gpu_policy,
    snapshot_failures,
)
from checks.gpu.readers import SnapshotError, opt_str, text
from checks.policy import ResolvedPolicy

UNIT = "nvidia-fabricmanager"
SYSTEMCTL_ARGV = ("systemctl", "is-active", UNIT)
GUIDE = "NVIDIA Fabric Manager User Guide, \"GPU fabric registration\""
FABRIC_NOT_COMPLETED = "fabric-not-completed"
FUNCTION_NOT_FOUND = "function_not_found"  # docs/gpu-snapshot.md, NVML_ERROR_FUNCTION_NOT_FOUND
SERVICE_INACTIVE = "service-inactive"
SERVICE_STATE_UNKNOWN = "service-state-unknown"
FIX = (f"Start the fabric manager (`systemctl enable --now {UNIT}`; its version must equal the "
       "driver's) and check /var/log/fabricmanager.log; GPUs that stay in_progress or report "
       "an error status need a GPU reset or reboot once it runs.")


def _nvswitch_on_pci(host: HostView, classes: List[str]) -> Optional[int]:
    """NVSwitch functions on PCI; None when the PCI inventory was not captured."""
    # host.json is input too (a bundle): entries of the wrong shape are not NVSwitches.
    pci = host.fact("pci_devices")
    if not isinstance(pci, list):
        return None
    return sum(1 for d in pci if isinstance(d, Mapping) and isinstance(d.get("class"), str)
               and d["class"].rjust(6, "0")[:4] in classes)


def _without_fabric_call(snap: GpuSnapshot) -> List[int]:
    """GPUs whose NVML has no fabric call (errors.fabric.kind function_not_found); a lost GPU
    is gpu-count's (each_field leaves it out of the findings), so it is left out here too."""
    out = []
    for gpu in snap.get("gpus") or []:
        errors = gpu.get("errors")
        err = errors.get("fabric") if isinstance(errors, Mapping) else None
        if gpu.get("error") or gpu.get("fabric") is not None or not isinstance(err, Mapping):
            continue
        if err.get("kind") == FUNCTION_NOT_FOUND:
            out.append(gpu["index"])
    return out


def _fabric_manager(host: HostView, policy: ResolvedPolicy, snap: GpuSnapshot) -> Outcome:
    fp = gpu_policy(policy).fabric
    f = Findings()
    states: Dict[int, FabricRecord] = {}
    fabric_gpus: List[Tuple[GpuRecord, Optional[str], Optional[str]]] = []
    for gpu, fabric in each_field(snap, "fabric", f):
        try:
            state, status = opt_str(fabric, "state", f.where), opt_str(fabric, "status", f.where)
        except SnapshotError as exc:
            f.malformed(exc)
            continue
        states[gpu["index"]] = fabric
        if state != "not_supported":
            fabric_gpus.append((gpu, state, status))
    pci_switches = _nvswitch_on_pci(host, list(fp.nvswitch_pci_classes))
    switches = pci_switches or 0
    if not fabric_gpus and not switches:
        no_call = _without_fabric_call(snap)
        # Only an older driver's missing call is left unread, and PCI shows no NVSwitch:
        # nothing says this host is on a fabric (module docstring).
        if f.unreadable and pci_switches == 0 and len(no_call) == len(f.unreadable):
            return not_applicable(
                "not an NVSwitch system (no NVSwitch on PCI; NVML has no fabric call on this "
                f"driver, {FUNCTION_NOT_FOUND}, on GPU {', '.join(map(str, no_call))})",
                nvswitches_on_pci=0, gpus_without_fabric_call=no_call)
        if f.unreadable:
            return f.outcome("", "fabric state")
        return skipped("not an NVSwitch system (no GPU reports a fabric state, no NVSwitch on PCI)")
    f.per_gpu = dict(states)
    for gpu, state, status in fabric_gpus:
        if state not in fp.ok_states or status != "success":
            # Filed after each_field's loop, so the GPU is named here (Findings.fail): the
            # finding is this GPU's, and details["gpus_at_fault"] (agent/gpu_health.py) must
            # carry it like every other per-GPU finding.
            f.fail(FABRIC_NOT_COMPLETED, f"{gpu_label(gpu)} fabric state "
                   f"{text(state or 'unknown')}, status {text(status or 'unknown')}", gpu=gpu)
    if pci_switches == 0:
        # GPUs on a fabric whose switches are not on this host's PCI bus (a GB200-class
        # compute tray): their registration is the verdict; no host fabric manager to ask.
        return f.outcome("{n} GPU(s) fabric state completed/success (no NVSwitch on PCI: the "
                         "fabric is managed outside this host)", "fabric state",
                         nvswitches_on_pci=0, service=None)
    service = host.run(list(SYSTEMCTL_ARGV), timeout=10)
    active = service.stdout.strip()
    if service.ok and active == "active":
        pass
    elif service.not_recorded or service.timed_out or service.not_installed:
        f.unreadable.append((SERVICE_STATE_UNKNOWN, f"{UNIT} service state: {service.describe()}"))
    else:
        f.failures.insert(0, (SERVICE_INACTIVE,
                              f"{UNIT} is {active or 'not active'} on an NVSwitch system"))
    return f.outcome(
        UNIT + " active; {n} GPU(s) fabric state completed/success", "fabric state",
        nvswitches_on_pci=switches, service=active or None,
    )


FABRIC_MANAGER = Check(
    id="fabric-manager",
    title="Fabric manager active and every GPU's fabric state COMPLETED/SUCCESS (NVSwitch systems)",
    severity=Severity.CRITICAL,
    gates=ALL_PATHS,
    interval=Interval.SLOW,
    remediation=f"`systemctl enable --now {UNIT}` (same version as the driver), then reset.",
    run=gpu_check(_fabric_manager),
    runs=(SYSTEMCTL_ARGV,),
    facts=("pci_devices",),
    uses_gpus=True,
    requires=NVML_REQUIRES,
    timeout_s=15.0,
    failures=(
        Failure(SERVICE_INACTIVE, Status.FAIL,
                f"{UNIT} is not active on an NVSwitch system", FIX, GUIDE),
        Failure(FABRIC_NOT_COMPLETED, Status.FAIL,
                "a GPU's fabric state is not completed/success (not registered with the fabric)",
                FIX, GUIDE),
        Failure(SERVICE_STATE_UNKNOWN, Status.UNKNOWN,
                f"the state of {UNIT} could not be read (`systemctl is-active` not recorded, "
                "timed out or not installed)",
                f"Run `systemctl is-active {UNIT}` on the host; for a bundle, collect it again "
                "there (collect records the command).", "systemctl(1), is-active"),
    ) + snapshot_failures(),
)
