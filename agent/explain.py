"""`gpu-node-agent explain ID`: every source a check reads, the values in force per path, and
the citation of each policy value.

The sources come from the check's own declaration (``reads``, ``presence``, ``runs``,
``facts``, ``uses_gpus``, ``uses_kmsg``, ``discover``), so what explain prints is what
`collect` captures and what the check may touch. Policy citations are the comment block above
each key in checks/policy_v<N>.yaml, where every default cites its source; a value a config
overrides says so instead.
"""
import importlib.resources
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from agent.model import DRA_PATHS, PATHS, Check

# Where each live fact comes from (agent/host/live.py, agent/kube/facts.py, agent/xid/state.py).
FACT_SOURCES: Mapping[str, str] = {
    "pci_devices": "PCI functions of vendor 10de (udev; else /sys/bus/pci/devices/*/"
    "{vendor,device,class} and the driver link)",
    "dev_nodes": "/dev/nvidia* character devices with their major/minor numbers (stat)",
    "adjtimex": "the kernel's clock discipline state (adjtimex(2), modes 0: read-only)",
    "node": "this host's Node from the Kubernetes API (labels, capacity, allocatable)",
    "runtimeclasses": "RuntimeClass objects from the Kubernetes API",
    "sticky": "the agent's sticky-fault state (<state_dir>/sticky.json, keyed by boot id)",
}

KERNEL_LOG = "the kernel log since boot: /dev/kmsg (NVRM lines), else `journalctl -k -b`"

# The GPU snapshot fields each NVML check reads, with the NVML call behind each
# (docs/gpu-snapshot.md has the full schema).
NVML_FIELDS: Mapping[str, Tuple[str, ...]] = {
    "nvml-responsive": (
        "driver_version (nvmlSystemGetDriverVersion)",
        "nvml_version (nvmlSystemGetNVMLVersion)",
        "cuda_driver_version (nvmlSystemGetCudaDriverVersion)",
        "device_count (nvmlDeviceGetCount)",
        "error (nvmlInit / worker deadline)",
    ),
    "gpu-count": (
        "device_count (nvmlDeviceGetCount)",
        "pci_bus_id (nvmlDeviceGetPciInfo_v3)",
        "error per GPU (lost GPUs)",
    ),
    "driver-persistence": ("persistence_mode (nvmlDeviceGetPersistenceMode)",),
    "fabric-manager": ("fabric (nvmlDeviceGetGpuFabricInfo)",),
    "cdi-spec-current": ("the GPU list (nvmlDeviceGetCount, index per GPU)",),
    "mig-mode": ("mig (nvmlDeviceGetMigMode: current and pending)",),
    "gpu-xid": (
        "index, uuid, pci_bus_id (nvmlDeviceGetUUID, nvmlDeviceGetPciInfo_v3): "
        "to name the GPU an XID line points at",
    ),
    "gpu-ecc": (
        "ecc (nvmlDeviceGetEccMode, nvmlDeviceGetTotalEccErrors volatile and aggregate)",
    ),
    "gpu-row-remap": ("remapped_rows (nvmlDeviceGetRemappedRows)",),
    "gpu-thermal": (
        "temperature (nvmlDeviceGetTemperature, nvmlDeviceGetTemperatureThreshold SLOWDOWN)",
        "clock_event_reasons (nvmlDeviceGetCurrentClocksEventReasons)",
    ),
    "gpu-pcie-link": (
        "pcie (nvmlDeviceGetCurrPcieLinkWidth/Generation, nvmlDeviceGetMaxPcieLinkWidth/"
        "Generation)",
    ),
    "gpu-nvlink": ("nvlink (nvmlDeviceGetNvLinkState per link)",),
}

# Policy keys (dotted, under checks/policy_v<N>.yaml) each check decides with.
POLICY_KEYS: Mapping[str, Tuple[str, ...]] = {
    "os-supported": ("os.supported", "os.deprecated"),
    "driver-branch": (
        "driver.minimum_branch",
        "driver.allowed_branches",
        "driver.warn_past_end_of_life_paths",
        "driver.managed_by_operator",
        "driver.branches",
    ),
    "toolkit-version": ("toolkit.minimum_version", "toolkit.managed_by_operator"),
    "kubelet-version": ("kubelet.minimum_version",),
    "fabric-manager": ("gpu.fabric",),
    "gpu-ecc": ("gpu.ecc",),
    "gpu-row-remap": ("gpu.row_remap",),
    "gpu-thermal": ("gpu.thermal",),
    "gpu-pcie-link": ("gpu.pcie",),
}

# Config settings (not policy) a check decides with, and where they are documented.
SETTING_KEYS: Mapping[str, Tuple[Tuple[str, str], ...]] = {
    "time-sync": (
        ("time_sync.offset_warn_s", "docs/time-sync.md"),
        ("time_sync.offset_fail_s", "docs/time-sync.md"),
        ("time_sync.reach_polls", "docs/time-sync.md"),
    ),
    "gpu-count": (("expected_gpus", "docs/config.md"),),
    "mig-mode": (("gpu.mig_strategy", "docs/config.md"),),
    "containerd-nvidia-runtime": (("containerd.handler", "docs/checks-container.md"),),
    "runtimeclass-handler": (
        ("kube.runtimeclass", "docs/kubernetes.md"),
        ("containerd.handler", "docs/checks-container.md"),
    ),
    "cdi-spec-current": (("cdi.require_spec", "docs/checks-container.md"),),
}


def _allocation_owner(path: str) -> str:
    # DRA paths expect the DRA kubelet plugin; the others the device plugin (docs/decisions.md).
    return "the NVIDIA DRA kubelet plugin" if path in DRA_PATHS else "the NVIDIA device plugin"


PATH_RULES = {"allocation-owner": ("expected GPU owner", _allocation_owner)}


def policy_citations(version: int = 1) -> Dict[str, str]:
    """Dotted key -> the comment lines written directly above it in policy_v<N>.yaml (the
    nearest enclosing key's comment when it has none of its own)."""
    text = importlib.resources.files("checks").joinpath(f"policy_v{version}.yaml").read_text()
    out: Dict[str, str] = {}
    stack: List[Tuple[int, str]] = []
    pending: List[str] = []
    last_child: Dict[str, str] = {}  # parent key -> the latest child citation written
    key_line = re.compile(r"^(\s*)([A-Za-z0-9_-]+):(?:\s|$)")
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            pending.append(stripped.lstrip("#").strip())
            continue
        m = key_line.match(line)
        if not m:
            if not stripped:
                continue
            pending = []  # a list item or a value: its comment is not a key's
            continue
        indent, key = len(m.group(1)), m.group(2)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, key))
        dotted = ".".join(k for _, k in stack)
        parent = ".".join(k for _, k in stack[:-1])
        # No comment of its own: the previous sibling's (os.deprecated shares the support
        # matrix's source written above os.supported), else the enclosing key's.
        if pending:
            out[dotted] = last_child[parent] = " ".join(pending)
        elif parent and last_child.get(parent):
            out[dotted] = last_child[parent]
        else:
            out[dotted] = out.get(parent, "")
        pending = []
    return out


def _lookup(data: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if hasattr(data, part):
            data = getattr(data, part)
        elif isinstance(data, Mapping) and part in data:
            data = data[part]
        else:
            return None
    return data


def _plain(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _short(value: Any, limit: int = 300) -> str:
    text = str(_plain(value))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _wrap(prefix: str, text: str, width: int = 100) -> List[str]:
    words, lines, line = text.split(), [], prefix
    indent = " " * len(prefix)
    for word in words:
        if len(line) + len(word) + 1 > width and line.strip():
            lines.append(line.rstrip())
            line = indent
        line += word + " "
    lines.append(line.rstrip())
    return lines


def header_lines(check: Check) -> List[str]:
    """Title, severity, the gate on each path, interval, requirements and what it is about."""
    lines = [f"{check.id}: {check.title}"]
    lines.append(f"  severity:  {check.severity}")
    lines.append(f"  gates:     {', '.join(check.gates) or '(none)'}")
    lines.append(f"  interval:  {check.interval}")
    if check.requires:
        lines.append(f"  requires:  {', '.join(check.requires)}")
    if check.description:
        lines += _wrap("  about:     ", check.description)
    return lines


def source_lines(check: Check) -> List[str]:
    """Every source the check reads, from its own declaration (what `collect` captures)."""
    lines = ["  sources:"]
    for path in check.reads:
        lines.append(f"    file     {path}")
    for pattern in check.presence:
        lines.append(f"    exists   {pattern} (name, mode and link target; not the content)")
    if check.discover is not None:
        lines.append("    files    named inside the files above (imports, spec paths), found at "
                     "run time")
    for argv in check.runs:
        lines.append(f"    command  {' '.join(argv)}")
    for name in check.facts:
        lines.append(f"    fact     {name}: {FACT_SOURCES.get(name, name)}")
    if check.uses_kmsg:
        lines.append(f"    log      {KERNEL_LOG}")
    if check.uses_gpus:
        for field in NVML_FIELDS.get(check.id, ("the GPU snapshot (docs/gpu-snapshot.md)",)):
            lines.append(f"    NVML     {field}")
    if len(lines) == 1:
        lines.append("    (none)")
    return lines


def value_lines(
    check: Check,
    policy: Any,
    defaults: Any,
    settings: Mapping[str, Any],
    origin: Optional[str],
    citations: Mapping[str, str],
) -> List[str]:
    """The policy and config values the check decides with, per path, each with its source
    (empty when it reads none)."""
    lines: List[str] = []
    keys = POLICY_KEYS.get(check.id, ())
    rule = PATH_RULES.get(check.id)
    settings_keys = SETTING_KEYS.get(check.id, ())
    if keys or rule or settings_keys or check.id == "gpu-xid":
        lines.append("  values in force:")
    if rule is not None:
        label, fn = rule
        for path in PATHS:
            lines.append(f"    {path:<23} {label}: {fn(path)}")
    for key in keys:
        value = _lookup(policy, key)
        default = _lookup(defaults, key)
        plain = _plain(value)
        if key == "driver.branches" and isinstance(plain, Mapping):
            lines += _wrap(f"    policy.{key} = ", "; ".join(
                f"R{b} {i['kind']}"
                + (" ended" if i.get("ended") else f" until {i['end_of_life']}"
                   if i.get("end_of_life") else "")
                for b, i in sorted(plain.items())))
        elif isinstance(plain, Mapping) and set(plain) == set(PATHS):
            lines.append(f"    policy.{key}, per path:")
            for path in PATHS:
                shown = "none (not gated on this path)" if plain[path] is None else plain[path]
                lines.append(f"      {path:<23} {shown}")
        else:
            lines.append(f"    policy.{key} = {_short(value)}")
        if _plain(default) != plain:
            lines.append(f"      source: set in {origin or 'the config'} (default "
                         f"{_short(default, 120)})")
        else:
            cite = citations.get(key) or "(no citation recorded)"
            lines += _wrap("      source: ", cite)
    if check.id == "gpu-xid":
        codes = _lookup(policy, "xid.codes")
        count = f" ({len(codes)} codes)" if isinstance(codes, Mapping) else ""
        lines.append(f"    policy.xid: XID codes and their classes{count}, "
                     "checks/xid_policy_v1.yaml")
        lines += _wrap("      source: ", str(_lookup(policy, "xid.source") or "docs/xid.md"))
    for key, doc in settings_keys:
        value = _lookup(settings, key)
        shown = "unset" if value is None else value
        lines.append(f"    config {key} = {shown} ({origin or 'built-in default'}; {doc})")
    return lines


def failure_lines(check: Check) -> List[str]:
    """Each declared failure code (Check.failures): its status, what was found, the fix and
    the source of the rule; docs/checks.md prints the same list."""
    if not check.failures:
        return ["  failures:  (none declared)"]
    lines = ["  failures:"]
    for f in check.failures:
        lines.append(f"    {f.code} ({f.status})")
        lines += _wrap("      found:  ", f.means)
        lines += _wrap("      fix:    ", f.fix)
        lines += _wrap("      source: ", f.source)
    return lines


def explain_lines(
    check: Check,
    policy: Any,
    defaults: Any,
    settings: Mapping[str, Any],
    origin: Optional[str],
    citations: Mapping[str, str],
) -> List[str]:
    """The text of `explain ID`. ``policy`` is the effective Policy, ``defaults`` the
    built-in one (to tell a config override from a default), ``settings`` the config.
    scripts/gen-check-docs writes docs/checks.md from these same parts."""
    lines = header_lines(check)
    lines += source_lines(check)
    lines += value_lines(check, policy, defaults, settings, origin, citations)
    lines += failure_lines(check)
    lines += _wrap("  fix:       ", check.remediation)
    return lines


def list_lines(checks: Sequence[Check]) -> List[str]:
    return [f"{c.id:<28} {c.severity!s:<9} {c.title}" for c in checks]
