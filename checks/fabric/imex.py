"""imex: the IMEX report of a multi-node NVLink host (GB200 NVL72 class).

IMEX (NVIDIA Internode Memory Exchange) lets the GPUs of one NVLink domain map each other's
memory across nodes. Either the host runs it, as the systemd service `nvidia-imex` (NVIDIA IMEX
Service for NVLink Networks User's Guide, "Getting Started with IMEX"), or the NVIDIA DRA
driver's ComputeDomains run IMEX daemons in pods the driver manages. On a ComputeDomains host
NVIDIA's guidance is to disable and mask the host service (NVIDIA GPU Operator documentation,
"NVIDIA DRA Driver for GPUs", ComputeDomain prerequisites with a pre-installed driver): both
at once is the one finding this check may gate on (the `imex` policy section says fail or warn).

The rest is a report (warn at most, never unknown, so it closes no gate by default):
- the host service: `systemctl is-active` and `is-enabled nvidia-imex` (systemctl(1));
- the IMEX channel nodes /dev/nvidia-caps-imex-channels/channelN: char devices whose major is
  the driver's `nvidia-caps-imex-channels` entry in /proc/devices and whose minor is N (the
  guide's "IMEX Channels"), read from the dev_nodes fact;
- the fabric clique id of every GPU whose fabric registration completed (NVML
  nvmlDeviceGetGpuFabricInfo, docs/gpu-snapshot.md `fabric`): the GPUs of one node are in one
  NVLink domain, so they report one clique id;
- whether this is a ComputeDomains host: config `imex.compute_domains`, or (auto) the
  compute-domain kubelet plugin registered with the kubelet.
"""
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Tuple

from checks.base import (
    ALL_PATHS,
    Check,
    CommandResult,
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
    warned,
)
from checks.fabric.channels import (  # noqa: F401 (channel_major: the tests read it here)
    CHANNEL_DEVICE,
    PROC_DEVICES,
    channel_major,
    read_channels,
)
from checks.fabric.policy import ImexPolicy
from checks.gpu.common import setting
from checks.gpu.readers import snapshot_problem, text
from checks.policy import ResolvedPolicy

UNIT = "nvidia-imex"
IS_ACTIVE = ("systemctl", "is-active", UNIT)
IS_ENABLED = ("systemctl", "is-enabled", UNIT)
# NVIDIA/k8s-dra-driver-gpu, cmd/compute-domain-kubelet-plugin/main.go: DriverName
# "compute-domain.nvidia.com". A DRA kubelet plugin registers with a socket in the kubelet's
# plugins_registry named <driver>-reg.sock, with an instance id before "-reg.sock" when it
# does rolling updates (kubernetes pkg/kubelet/pluginmanager/pluginwatcher/README.md;
# k8s.io/dynamic-resource-allocation/kubeletplugin, KubeletRegistryDir).
CD_DRIVER = "compute-domain.nvidia.com"
CD_REGISTRATION = f"/var/lib/kubelet/plugins_registry/{CD_DRIVER}-*reg.sock"

# systemd src/basic/unit-def.c (unit_active_state_table) and systemctl(1) is-enabled.
ACTIVE_STATES = ("active", "reloading", "inactive", "failed", "activating", "deactivating",
                 "maintenance", "refreshing")
RUNNING = ("active", "reloading", "activating", "refreshing")
FILE_STATES = ("enabled", "enabled-runtime", "linked", "linked-runtime", "alias", "masked",
               "masked-runtime", "static", "indirect", "disabled", "generated", "transient",
               "bad", "not-found")
ENABLED = ("enabled", "enabled-runtime")
MASKED = ("masked", "masked-runtime")

HOST_IMEX_CONFLICT = "host-imex-conflict"
SERVICE_STATE_UNKNOWN = "service-state-unknown"
CLIQUE_ID_MISMATCH = "clique-id-mismatch"
CHANNEL_NODE_MISMATCH = "channel-node-mismatch"
GUIDE = "NVIDIA IMEX Service for NVLink Networks User's Guide"
OPERATOR_DRA = ("NVIDIA GPU Operator documentation, \"NVIDIA DRA Driver for GPUs\" (ComputeDomain "
                "prerequisites: disable and mask nvidia-imex.service)")
CONFLICT_FIX = f"systemctl disable --now {UNIT} && systemctl mask {UNIT}"


class Service(NamedTuple):
    active: Optional[str]  # a state of ACTIVE_STATES; None = not read
    enabled: Optional[str]  # a state of FILE_STATES; None = not read
    unread: List[str]  # why a state was not read (not recorded, timed out, unrecognised)

    @property
    def absent(self) -> bool:
        return self.enabled == "not-found"

    @property
    def conflicting(self) -> bool:
        return self.active in RUNNING or self.enabled in ENABLED

    def words(self) -> str:
        if self.absent:
            return f"no {UNIT} unit"
        if self.enabled in MASKED:
            return f"{UNIT} {self.enabled}"
        return f"{UNIT} {self.active or 'state unknown'}, {self.enabled or 'file state unknown'}"


def _state(result: CommandResult, known: Tuple[str, ...], unread: List[str]) -> Optional[str]:
    if result.not_recorded or result.timed_out:
        unread.append(result.describe())
        return None
    if result.not_installed:  # no systemctl: no systemd, so no systemd service either
        return "not-found" if known is FILE_STATES else "inactive"
    lines = result.stdout.strip().splitlines()
    word = lines[0].strip() if lines else ""
    if word in known:
        return word
    # systemd before "not-found" existed: nothing on stdout, "No such file" on stderr.
    if known is FILE_STATES and not word and "No such file" in result.stderr:
        return "not-found"
    unread.append(f"`{' '.join(result.argv)}` answered {text(word or result.stderr.strip())}")
    return None


def read_service(host: HostView) -> Service:
    unread: List[str] = []
    active = _state(host.run(list(IS_ACTIVE), timeout=10), ACTIVE_STATES, unread)
    enabled = _state(host.run(list(IS_ENABLED), timeout=10), FILE_STATES, unread)
    return Service(active, enabled, unread)


def read_cliques(host: HostView) -> Tuple[Optional[Dict[int, int]], str]:
    """(clique id per GPU index for GPUs whose fabric registration completed, None without a
    usable snapshot; what the snapshot said)."""
    snap: Any = host.gpus()
    if snap is None or snapshot_problem(snap) is not None or snap.get("error"):
        return None, "no usable GPU snapshot"
    cliques: Dict[int, int] = {}
    for gpu in snap.get("gpus") or []:
        fabric = gpu.get("fabric")
        if not isinstance(fabric, Mapping) or fabric.get("state") != "completed":
            continue
        clique = fabric.get("clique_id")
        if fabric.get("status") == "success" and isinstance(clique, int) \
                and not isinstance(clique, bool):
            cliques[gpu["index"]] = clique
    if not cliques:
        return cliques, "no GPU in a completed NVLink fabric"
    ids = sorted(set(cliques.values()))
    return cliques, f"fabric clique id {', '.join(str(i) for i in ids)} on {len(cliques)} GPU(s)"


def compute_domains(host: HostView, policy: ResolvedPolicy) -> Tuple[bool, str]:
    configured = setting(policy, "imex", "compute_domains", "auto")
    if isinstance(configured, bool):
        return configured, f"config imex.compute_domains: {str(configured).lower()}"
    found = host.glob(CD_REGISTRATION)
    if found:
        return True, f"{CD_DRIVER} kubelet plugin registered: {found[0]}"
    return False, f"no {CD_DRIVER} kubelet plugin registration"


def imex_policy(policy: ResolvedPolicy) -> ImexPolicy:
    found = getattr(getattr(policy, "policy", None), "imex", None)
    return found if isinstance(found, ImexPolicy) else ImexPolicy()


def _mismatch(cliques: Dict[int, int]) -> str:
    by_id: Dict[int, List[int]] = {}
    for index, clique in sorted(cliques.items()):
        by_id.setdefault(clique, []).append(index)
    return "; ".join(f"clique {c}: GPU {', '.join(str(i) for i in gs)}"
                     for c, gs in sorted(by_id.items()))


def _unread_words(unread: List[str]) -> str:
    if all(u.endswith(" not recorded for this host") for u in unread):
        return f"{UNIT} state not recorded (`systemctl is-active/is-enabled {UNIT}`)"
    return f"{UNIT} state not read ({'; '.join(unread)})"


def _imex(host: HostView, policy: ResolvedPolicy) -> Outcome:
    service = read_service(host)
    channels, wrong = read_channels(host)
    cliques, fabric_words = read_cliques(host)
    cd, cd_why = compute_domains(host, policy)
    details: Dict[str, Any] = {
        "compute_domains": cd, "compute_domains_evidence": cd_why,
        "service": {"active": service.active, "enabled": service.enabled},
        "service_unread": service.unread, "channels": channels,
        "clique_ids": None if cliques is None else {str(k): v for k, v in cliques.items()},
    }
    service_words = service.words() if not service.unread else _unread_words(service.unread)
    channel_words = ("IMEX channel nodes not captured" if channels is None else
                     f"{len(channels)} IMEX channel node(s)" if channels else
                     "no IMEX channel node")
    facts = f"{service_words}; {channel_words}; {fabric_words}"
    if cd and service.conflicting:
        summary = (f"host {UNIT} is {service.active}, {service.enabled} on a ComputeDomains host "
                   f"[{cd_why}]: the DRA driver runs IMEX in its own pods")
        outcome = failed if imex_policy(policy).host_service_conflict == "fail" else warned
        return outcome(summary, remediation=CONFLICT_FIX, code=HOST_IMEX_CONFLICT, **details)
    if cd and service.unread:
        return warned(f"ComputeDomains host [{cd_why}]; {service_words}: the host service "
                      "conflict cannot be ruled out", code=SERVICE_STATE_UNKNOWN, **details)
    if cliques and len(set(cliques.values())) > 1:
        return warned(f"GPUs of this node report different fabric clique ids ({_mismatch(cliques)})"
                      f"; {service_words}", code=CLIQUE_ID_MISMATCH, **details)
    if wrong:
        return warned(f"IMEX channel node(s) do not match the driver: {'; '.join(wrong[:4])}",
                      code=CHANNEL_NODE_MISMATCH, **details)
    installed = service.enabled is not None and not service.absent
    # ComputeDomains evidence alone (a socket) with neither the channel nodes nor the snapshot
    # captured is too little to call this host's IMEX sound: that is missing input.
    seen = channels is not None or cliques is not None
    if channels or cliques or installed or (cd and seen):
        role = "ComputeDomains host" if cd else "host IMEX" if service.conflicting else "IMEX"
        return passed(f"{role}: {facts}", **details)
    if service.absent and channels is not None:
        return not_applicable(f"no IMEX on this host: {facts}", **details)
    return input_missing(f"IMEX inputs not captured: {facts}", **details)


IMEX = Check(
    id="imex",
    title="IMEX report: host nvidia-imex service, channel nodes, fabric clique ids "
          "(multi-node NVLink)",
    severity=Severity.CRITICAL,
    gates=ALL_PATHS,
    interval=Interval.SLOW,
    remediation=f"On a ComputeDomains host: `{CONFLICT_FIX}` (the DRA driver runs IMEX).",
    run=_imex,
    reads=(PROC_DEVICES,),
    presence=(CD_REGISTRATION,),
    runs=(IS_ACTIVE, IS_ENABLED),
    facts=("dev_nodes",),
    uses_gpus=True,
    timeout_s=25.0,
    since_policy=2,
    failures=(
        # Statuses as policy version 2 has them (imex.host_service_conflict: fail).
        Failure(HOST_IMEX_CONFLICT, Status.FAIL,
                f"the host {UNIT} service is active or enabled on a ComputeDomains host",
                f"Disable and mask it (`{CONFLICT_FIX}`): the NVIDIA DRA driver runs the IMEX "
                "daemons of each ComputeDomain in its own pods.", OPERATOR_DRA),
        Failure(SERVICE_STATE_UNKNOWN, Status.WARN,
                f"a ComputeDomains host whose {UNIT} state could not be read (not recorded, "
                "timed out or an answer systemctl(1) does not give)",
                f"Run `systemctl is-active {UNIT}` and `systemctl is-enabled {UNIT}` on the "
                "host; for a bundle, collect it again there (`sudo gpu-node-agent collect` "
                "records both).", "systemctl(1), is-active and is-enabled"),
        Failure(CLIQUE_ID_MISMATCH, Status.WARN,
                "GPUs of this node report different NVLink fabric clique ids",
                "Check the NVLink domain's partition configuration (NVIDIA NMX / nvlink "
                "partitions) and each GPU's fabric state (`nvidia-smi -q`, Fabric); the GPUs "
                "of one node belong in one clique.",
                "NVML API Reference, nvmlDeviceGetGpuFabricInfo (nvmlGpuFabricInfo_t.cliqueId)"),
        Failure(CHANNEL_NODE_MISMATCH, Status.WARN,
                f"an IMEX channel node's major is not /proc/devices' {CHANNEL_DEVICE} or its "
                "minor is not its channel number",
                "Remove the stale node and recreate it: `mknod "
                "/dev/nvidia-caps-imex-channels/channelN c <major> N` with the major from "
                f"`grep {CHANNEL_DEVICE} /proc/devices` (channels do not survive a reboot).",
                f"{GUIDE}, \"IMEX Channels\""),
    ),
)
