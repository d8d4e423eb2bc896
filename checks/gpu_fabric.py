"""fabric-manager: on NVSwitch systems, the fabric manager runs and every GPU joined the fabric.

An HGX/DGX board's GPUs talk over NVSwitches; until nvidia-fabricmanager has programmed
the switches and the GPUs registered (NVML fabric state COMPLETED, status SUCCESS), CUDA
initialisation fails on them (NVIDIA Fabric Manager User Guide, "GPU fabric registration").
"""
from typing import Any, Dict, List, Mapping, Optional, Tuple

from checks.base import ALL_PATHS, Check, Interval, Outcome, Severity, skipped
from checks.gpu_common import (
    NVML_REQUIRES,
    Findings,
    SnapshotError,
    each_field,
    gpu_label,
    gpu_policy,
    gpus_of,
    opt_str,
    text,
)

UNIT = "nvidia-fabricmanager"
SYSTEMCTL_ARGV = ("systemctl", "is-active", UNIT)


def _nvswitch_on_pci(host: Any, classes: List[str]) -> int:
    # host.json is input too (a bundle): entries of the wrong shape are not NVSwitches.
    pci = host.fact("pci_devices")
    if not isinstance(pci, list):
        return 0
    return sum(1 for d in pci if isinstance(d, Mapping) and isinstance(d.get("class"), str)
               and d["class"].rjust(6, "0")[:4] in classes)


def _fabric_manager(host: Any, policy: Any) -> Outcome:
    snap, early = gpus_of(host)
    if early is not None:
        return early
    assert snap is not None
    fp = gpu_policy(policy).fabric
    f = Findings()
    states: Dict[int, Any] = {}
    fabric_gpus: List[Tuple[Any, Optional[str], Optional[str]]] = []
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
    f.per_gpu = states
    for gpu, state, status in fabric_gpus:
        if state not in fp.ok_states or status != "success":
            f.failures.append(f"{gpu_label(gpu)} fabric state {text(state or 'unknown')}, "
                              f"status {text(status or 'unknown')}")
    service = host.run(list(SYSTEMCTL_ARGV), timeout=10)
    active = service.stdout.strip()
    if service.ok and active == "active":
        pass
    elif service.not_recorded or service.timed_out or service.not_installed:
        f.unreadable.append(f"{UNIT} service state: {service.describe()}")
    else:
        f.failures.insert(0, f"{UNIT} is {active or 'not active'} on an NVSwitch system")
    return f.outcome(
        UNIT + " active; {n} GPU(s) fabric state completed/success", "fabric state",
        f"Start the fabric manager (`systemctl enable --now {UNIT}`; its version must equal the "
        "driver's) and check /var/log/fabricmanager.log; GPUs that stay in_progress or report "
        "an error status need a GPU reset or reboot once it runs.",
        nvswitches_on_pci=switches, service=active or None,
    )


FABRIC_MANAGER = Check(
    id="fabric-manager",
    title="Fabric manager active and every GPU's fabric state COMPLETED/SUCCESS (NVSwitch systems)",
    severity=Severity.CRITICAL,
    gates=ALL_PATHS,
    interval=Interval.SLOW,
    remediation=f"`systemctl enable --now {UNIT}` (same version as the driver), then reset.",
    run=_fabric_manager,
    runs=(SYSTEMCTL_ARGV,),
    facts=("pci_devices",),
    uses_gpus=True,
    requires=NVML_REQUIRES,
    timeout_s=15.0,
)
