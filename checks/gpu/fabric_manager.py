"""fabric-manager: on NVSwitch systems, the fabric manager runs and every GPU joined the fabric.

An HGX/DGX board's GPUs talk over NVSwitches; until nvidia-fabricmanager has programmed
the switches and the GPUs registered (NVML fabric state COMPLETED, status SUCCESS), CUDA
initialisation fails on them (NVIDIA Fabric Manager User Guide, "GPU fabric registration").
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
SERVICE_INACTIVE = "service-inactive"
SERVICE_STATE_UNKNOWN = "service-state-unknown"
FIX = (f"Start the fabric manager (`systemctl enable --now {UNIT}`; its version must equal the "
       "driver's) and check /var/log/fabricmanager.log; GPUs that stay in_progress or report "
       "an error status need a GPU reset or reboot once it runs.")


def _nvswitch_on_pci(host: HostView, classes: List[str]) -> int:
    # host.json is input too (a bundle): entries of the wrong shape are not NVSwitches.
    pci = host.fact("pci_devices")
    if not isinstance(pci, list):
        return 0
    return sum(1 for d in pci if isinstance(d, Mapping) and isinstance(d.get("class"), str)
               and d["class"].rjust(6, "0")[:4] in classes)


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
    switches = _nvswitch_on_pci(host, list(fp.nvswitch_pci_classes))
    if not fabric_gpus and not switches:
        if f.unreadable:
            return f.outcome("", "fabric state")
        return skipped("not an NVSwitch system (no GPU reports a fabric state, no NVSwitch on PCI)")
    f.per_gpu = dict(states)
    for gpu, state, status in fabric_gpus:
        if state not in fp.ok_states or status != "success":
            f.fail(FABRIC_NOT_COMPLETED, f"{gpu_label(gpu)} fabric state "
                   f"{text(state or 'unknown')}, status {text(status or 'unknown')}")
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
