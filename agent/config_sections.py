"""The sections of the configuration file (agent/config.py's Config holds one of each): records
(agent/safeio/schema.py), each field with its default and why, validated as the file is parsed.
Unknown keys are errors: a typo must not silently do nothing.
"""
import re
from typing import Any, Dict, List, Literal, Optional

from agent.model import PATHS
from agent.safeio.schema import Field, Record, field_validator, model_validator


def _refuse(problem: Optional[str]) -> None:
    """A field validator's refusal: the schema reports the ValueError as the field's error."""
    if problem:
        raise ValueError(problem)


AllocationPath = Literal["device-plugin", "dra", "operator-clusterpolicy", "operator-gpucluster"]
assert set(AllocationPath.__args__) == set(PATHS)  # type: ignore[attr-defined]


class _Section(Record):
    """Unknown keys are refused."""


class ContainerdConfig(_Section):
    # The runtime handler pods ask for (RuntimeClass.handler); nvidia-ctk writes "nvidia".
    handler: str = Field(default="nvidia", min_length=1)
    config_path: str = "/etc/containerd/config.toml"


class CdiConfig(_Section):
    # A host with no NVIDIA CDI spec passes cdi-spec-current unless this is true.
    require_spec: bool = False


class ToolkitConfig(_Section):
    # How the NVIDIA device plugin passes its GPUs to the runtime (NVIDIA/k8s-device-plugin
    # README, "deviceListStrategy"; envvar is its default): toolkit-runtime-config judges
    # /etc/nvidia-container-runtime/config.toml against it on device-plugin paths.
    device_list_strategy: Literal["envvar", "volume-mounts", "cdi-annotations", "cdi-cri"] = (
        "envvar")


class KubeConfig(_Section):
    """The verdict on the Node (docs/kubernetes.md). Defaults: the kubelet's own credentials."""

    enabled: bool = True
    kubeconfig: str = "/var/lib/kubelet/kubeconfig"
    context: Optional[str] = None
    # Empty = the name the kubelet registered (nodeadm NodeConfig, --hostname-override,
    # kubelet client certificate CN, hostname: agent/kube/nodename.py).
    node_name: Optional[str] = None
    allocation_label: str = "workload.example.com/gpu-allocation"
    # Empty = the allocation path's name (dra, device-plugin, ...).
    allocation_value: Optional[str] = None
    health_label: str = "workload.example.com/gpu-healthy"
    condition_type: str = Field(default="GPUReady", min_length=1)
    # The RuntimeClass runtimeclass-handler looks for (its handler must be containerd.handler).
    runtimeclass: str = Field(default="nvidia", min_length=1)
    consecutive_opens: int = Field(default=3, ge=1, le=100)
    remove_allocation_label_on_failure: bool = False
    cordon_on_fatal: bool = False
    fatal_checks: List[str] = ["gpu-xid", "gpu-ecc", "gpu-row-remap"]
    heartbeat_interval: float = Field(default=300.0, ge=10.0, le=3600.0)
    resync_interval: float = Field(default=600.0, ge=10.0, le=86400.0)
    request_timeout: float = Field(default=10.0, gt=0.0, le=120.0)
    exec_timeout: float = Field(default=20.0, gt=0.0, le=300.0)
    # Annotations under this prefix record what the agent owns (managed keys, its cordon).
    annotation_prefix: str = "gpu-node-agent.workload.example.com"
    # Empty = the built-in candidates (agent/kube/nodename.py).
    nodeadm_config_paths: List[str] = []

    @field_validator("allocation_label", "health_label")
    @classmethod
    def _label_key(cls, key: str) -> str:
        # A key NodeRestriction refuses to a node would 403 on every cycle: refuse it here.
        from agent.outputs.node.labels import label_key_problem

        _refuse(label_key_problem(key))
        return key

    @field_validator("allocation_value")
    @classmethod
    def _label_value(cls, value: Optional[str]) -> Optional[str]:
        # The API's label value rule (a 422 on every cycle otherwise): agent/outputs/node/labels.py.
        from agent.outputs.node.labels import label_value_problem

        _refuse(label_value_problem(value) if value else None)
        return value

    @field_validator("annotation_prefix")
    @classmethod
    def _annotation_prefix(cls, prefix: str) -> str:
        from agent.outputs.node.labels import annotation_prefix_problem

        _refuse(annotation_prefix_problem(prefix))
        return prefix


# A MIG profile as `nvidia-smi mig -lgip` names it, without "MIG " (NVIDIA Multi-Instance GPU
# User Guide, "Supported MIG Profiles": 1g.10gb, 3g.40gb, 1g.10gb+me, 1g.24gb+gfx, 1g.24gb-me).
MIG_PROFILE = re.compile(r"^[1-8]g\.[0-9]{1,4}gb([+-][a-z]+(\.[a-z]+)?)*$")


def mig_geometry_problem(geometry: Dict[str, List[str]]) -> Optional[str]:
    for key, profiles in geometry.items():
        if not key.strip():
            return "a key is empty: name a GPU index (\"0\") or a product name"
        if not profiles:
            return f"{key!r} lists no profile: leave the GPU out to not check it"
        for profile in profiles:
            if not MIG_PROFILE.match(profile):
                return (f"{key!r}: {profile[:40]!r} is not a MIG profile name (like 1g.10gb or "
                        "3g.40gb, as nvidia-smi mig -lgip prints it without \"MIG \")")
    return None


class GpuConfig(_Section):
    """NVML worker deadlines and GPU expectations (docs/gpu-snapshot.md, docs/runbook-nvml.md)."""

    # MIG strategy, as the GPU Operator / device plugin name it (none | single | mixed);
    # none = MIG must be disabled on every GPU.
    mig_strategy: Literal["none", "single", "mixed"] = "none"
    # Expected MIG geometry (mig-geometry, policy version 2): the GPU instance profiles of a
    # GPU, keyed by NVML index ("0") or product name ("NVIDIA H100 80GB HBM3"); an index key
    # beats a product key. Empty = not checked (docs/config.md).
    mig_geometry: Dict[str, List[str]] = {}
    # Every NVML request after the first; the first includes nvmlInit, which without
    # persistence mode can take seconds per GPU. The nvml-responsive check itself has a
    # 90 s engine timeout, so the first deadline stays below it.
    nvml_deadline_s: float = Field(default=10.0, gt=0.0, le=60.0)
    nvml_first_deadline_s: float = Field(default=45.0, gt=0.0, le=80.0)
    # While this file exists the agent holds no NVML handle (maintenance mode).
    maintenance_flag: str = "/run/gpu-node-agent/nvml-maintenance"
    # Fabric manager service probed on NVSwitch systems.
    fabric_manager_unit: str = Field(default="nvidia-fabricmanager", min_length=1)
    # A standalone NVIDIA device plugin's config file(s) on this host (its --config-file), read
    # for sharing.timeSlicing / sharing.mps (allocation-owner, gpu-capacity); none by default.
    device_plugin_config_files: List[str] = []

    @field_validator("mig_geometry", mode="before")
    @classmethod
    def _mig_geometry_index_keys(cls, geometry: Any) -> Any:
        # YAML reads an unquoted `0:` as an integer: an NVML index is meant.
        if isinstance(geometry, dict):
            return {str(k) if isinstance(k, int) and not isinstance(k, bool) else k: v
                    for k, v in geometry.items()}
        return geometry

    @field_validator("mig_geometry")
    @classmethod
    def _mig_geometry(cls, geometry: Dict[str, List[str]]) -> Dict[str, List[str]]:
        _refuse(mig_geometry_problem(geometry))
        return geometry


class NfdConfig(_Section):
    enabled: bool = False
    path: str = "/etc/kubernetes/node-feature-discovery/features.d/gpu-node-agent"
    # Labels expire this long after the last write, so a dead agent's labels go away.
    expiry: float = Field(default=3600.0, ge=60.0)


class SiteChecksConfig(_Section):
    """The site's own checks (docs/site-checks.md): executables in `dir`, run as checks.
    Unset: none. Read when the command starts (a new file needs a restart, not SIGHUP)."""

    dir: Optional[str] = None

    @field_validator("dir")
    @classmethod
    def _absolute(cls, value: Optional[str]) -> Optional[str]:
        _refuse("must be an absolute path" if value is not None and not value.startswith("/")
                else None)
        return value


class RunConfig(_Section):
    """`gpu-node-agent run` (docs/metrics.md, docs/systemd.md)."""

    # How often `fast` and `slow` checks re-run; bootstrap-only checks run at start and after
    # a reload. 60 s matches a typical Prometheus scrape interval; slow checks read configs.
    fast_interval: float = Field(default=60.0, gt=0.0, le=86400.0)
    slow_interval: float = Field(default=900.0, gt=0.0, le=86400.0)
    # host:port; "[::]:9845" for IPv6. Plain HTTP unless web_config_file sets TLS.
    listen_address: str = Field(default="0.0.0.0:9845", min_length=3)
    # exporter-toolkit web-config (tls_server_config, basic_auth_users with bcrypt hashes).
    web_config_file: Optional[str] = None
    # node_exporter textfile collector directory: writes gpu_node_agent.prom there.
    textfile_dir: Optional[str] = None
    # Exit (for systemd to restart the unit) when NVIDIA char devices appear after start:
    # DeviceAllow=char-nvidia* is resolved when the unit starts (docs/systemd.md).
    exit_on_new_driver: bool = True
    # NVML maintenance while the GPU Operator's upgrade controller replaces the driver on this
    # node (the Node label nvidia.com/gpu-driver-upgrade-state: agent/daemon/upgrade.py).
    follow_driver_upgrade: bool = True
    # Re-evaluate the GPU checks at once on an XID (kernel log or NVML) or a GPU loss, at
    # most once a second, rather than at the next fast cycle (agent/daemon/triggers.py).
    event_driven: bool = True
    # Per-GPU telemetry dcgm-exporter also exports (temperatures, framebuffer, remapped rows,
    # clocks, PCIe, NVLink: agent/outputs/metrics_gpu.py); off: only what health alerts read.
    gpu_telemetry: bool = False
    # Per-check check_info, check_duration_seconds, check_last_run_timestamp_seconds (three
    # series per check; the status series carry the severity without them).
    check_details: bool = False

    @field_validator("listen_address")
    @classmethod
    def _listen(cls, value: str) -> str:
        _refuse(listen_address_problem(value))
        return value


class TimeSyncConfig(_Section):
    # |offset| limits for time-sync (docs/time-sync.md): 100 ms warns, 1 s fails.
    offset_warn_s: float = Field(default=0.1, gt=0)
    offset_fail_s: float = Field(default=1.0, gt=0)
    # chronyd's command socket when not the default /run/chrony/chronyd.sock (chronyc -h).
    chrony_socket: Optional[str] = None
    # The selected source must have answered within its last N polls (its reach register).
    reach_polls: int = Field(default=4, ge=1, le=8)

    @model_validator(mode="after")
    def _ordered(self) -> "TimeSyncConfig":
        # A warn limit above the fail limit would fail an offset before it ever warned.
        if self.offset_warn_s > self.offset_fail_s:
            raise ValueError(
                f"offset_warn_s ({self.offset_warn_s:g}) is above offset_fail_s "
                f"({self.offset_fail_s:g}): the warning limit must be the smaller one"
            )
        return self


class WorkloadConfig(_Section):
    """gpu-workload (docs/workload.md): a GPU container started through containerd, opt-in per
    allocation path. Empty `paths` = never run."""

    paths: List[AllocationPath] = []
    # NVIDIA's CUDA base image carries no nvidia-smi itself: the NVIDIA Container Toolkit
    # injects it (CDI spec / runtime hook), which is what this proves. Air-gapped hosts
    # preload it (`ctr -n k8s.io images import`).
    image: str = Field(default="nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04", min_length=1)
    command: List[str] = Field(default=["nvidia-smi", "-L"], min_length=1)
    # Absent image: `skip` instead of `fail`.
    skip_if_image_missing: bool = False
    # auto: CRI before the kubelet runs (no kubelet_socket), containerd's native API after.
    route: Literal["auto", "cri", "native"] = "auto"
    socket: str = "/run/containerd/containerd.sock"
    kubelet_socket: str = "/var/lib/kubelet/pod-resources/kubelet.sock"
    namespace: str = Field(default="gpu-node-agent", min_length=1)
    cdi_device: str = Field(default="nvidia.com/gpu=all", min_length=1)
    # `ctr` for the native route (shipped with containerd).
    ctr: str = Field(default="ctr", min_length=1)
    step_deadline_s: float = Field(default=30.0, gt=0.0, le=120.0)
    cleanup_deadline_s: float = Field(default=10.0, gt=0.0, le=60.0)




_HOST_LABEL = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")


def listen_address_problem(text: str) -> Optional[str]:
    """Why ``text`` is not a listen address (None when it is): the metrics server's own
    parser, then the host part must be an IP address or an RFC 1123 host name."""
    import ipaddress  # here: only a config that sets a listen address pays its import

    from agent.outputs.http_wire import parse_listen_address

    try:
        host, _port = parse_listen_address(text)
    except ValueError as exc:
        return str(exc)
    try:
        ipaddress.ip_address(host)
        return None
    except ValueError:
        pass
    labels = host.rstrip(".").split(".")
    # RFC 1123 labels; an all-numeric last label is a mistyped IPv4 address (RFC 3696 s2).
    if (
        len(host) > 253
        or not all(_HOST_LABEL.match(label) for label in labels)
        or labels[-1].isdigit()
    ):
        return f"listen address {text!r}: {host!r} is neither an IP address nor a host name"
    return None
