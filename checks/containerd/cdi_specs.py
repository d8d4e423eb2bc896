"""Reading CDI specs (Container Device Interface, cncf-tags/container-device-interface
SPEC.md): where they are, which are NVIDIA's, what host paths they reference.

Pure parsers over text; every malformed input becomes an error string naming the file and
line, never an exception.
"""

import posixpath
import re
from typing import Any, Dict, List, Optional, Tuple

from agent.records import field, record
from agent.safeio import jsonio, yamlio
from checks.base import HostView

# The CDI default spec directories (SPEC.md "CDI JSON/YAML file locations"); containerd's
# cdi_spec_dirs default to the same two. Later directories have higher priority.
CDI_DIRS = ("/etc/cdi", "/var/run/cdi")
SPEC_GLOBS = tuple(f"{d}/*.{ext}" for d in CDI_DIRS for ext in ("yaml", "yml", "json"))
# Released spec versions (SPEC.md "Version history"), newest last.
KNOWN_VERSIONS = ("0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0")
# The NVIDIA DRA driver writes one spec per prepared claim (k8s-dra-driver-gpu cdi.go):
# /var/run/cdi/k8s.gpu.nvidia.com-claim_<uid>.yaml. These are checked for paths only.
CLAIM_PREFIX = "k8s.gpu.nvidia.com-claim_"
HOST_WIDE_KIND = "nvidia.com/gpu"
# container-device-interface pkg/parser: vendor is a domain-like name, class alphanumeric
# with '-' and '_'; a device name is alphanumeric plus '_', '-', '.', ':' inside.
_KIND = re.compile(
    r"^[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?/[A-Za-z0-9](?:[A-Za-z0-9_-]*[A-Za-z0-9])?$"
)
_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9_.:-]*[A-Za-z0-9])?$")
_GPU_NODE = re.compile(r"^/dev/nvidia(\d+)$")
_LIB_VERSION = re.compile(r"^lib(?:nvidia|cuda)[\w.-]*\.so\.(\d+\.\d+(?:\.\d+)?)$")
_HOOK_DRIVER = re.compile(r"^--host-driver-version=(\S+)$")


@record
class Spec:
    path: str
    data: Optional[Dict[str, Any]] = None
    error: Optional[str] = None

    @property
    def name(self) -> str:
        return posixpath.basename(self.path)

    @property
    def is_claim(self) -> bool:
        return self.name.startswith(CLAIM_PREFIX)

    @property
    def kind(self) -> str:
        k = (self.data or {}).get("kind")
        return k if isinstance(k, str) else ""

    @property
    def version(self) -> str:
        v = (self.data or {}).get("cdiVersion")
        return v if isinstance(v, str) else ""

    @property
    def is_nvidia(self) -> bool:
        vendor = self.kind.split("/", 1)[0]
        return (
            vendor == "nvidia.com"
            or vendor.endswith(".nvidia.com")
            or (self.data is None and "nvidia" in self.name.lower())
        )


def parse_spec(text: str, path: str) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
    # Bounded loaders (agent/safeio/yamlio.py, agent/safeio/jsonio.py): an alias bomb, deep
    # nesting or a huge integer is an error naming the file, like any malformed spec.
    try:
        data = jsonio.loads(text) if path.endswith(".json") else yamlio.safe_load(text)
    except jsonio.JsonError as exc:
        if exc.lineno:
            return None, f"{path}: line {exc.lineno}: {exc.problem}"
        return None, f"{path}: {exc.problem}"
    except yamlio.YamlError as exc:
        mark = exc.problem_mark
        line = f"line {mark.line + 1}: " if mark is not None else ""
        return None, f"{path}: {line}invalid YAML ({exc.problem})"
    if not isinstance(data, dict):
        return None, f"{path}: line 1: a CDI spec must be a mapping"
    return data, None


def load_specs(host: HostView) -> List[Spec]:
    specs = []
    for pattern in SPEC_GLOBS:
        for path in host.glob(pattern):
            text = host.read_text_or_none(path)
            if text is None:
                continue
            data, err = parse_spec(text, path)
            specs.append(Spec(path, data, err))
    return specs


def _list(value: Any) -> List[Any]:
    return value if isinstance(value, list) else []


def _edits(data: Dict[str, Any]) -> List[Dict[str, Any]]:
    out = [data.get("containerEdits")]
    out += [d.get("containerEdits") for d in _list(data.get("devices")) if isinstance(d, dict)]
    return [e for e in out if isinstance(e, dict)]


def _node_path(node: Dict[str, Any]) -> Optional[str]:
    for key in ("hostPath", "path"):
        if isinstance(node.get(key), str) and node[key]:
            return str(node[key])
    return None


@record
class References:
    device_nodes: List[str] = field(default_factory=list)
    mounts: List[str] = field(default_factory=list)
    hooks: List[str] = field(default_factory=list)
    driver_versions: Dict[str, str] = field(default_factory=dict)  # evidence -> version


def references(data: Dict[str, Any]) -> References:
    refs = References()
    for edit in _edits(data):
        for node in _list(edit.get("deviceNodes")):
            if isinstance(node, dict) and _node_path(node):
                refs.device_nodes.append(_node_path(node) or "")
        for mount in _list(edit.get("mounts")):
            host_path = mount.get("hostPath") if isinstance(mount, dict) else None
            if isinstance(host_path, str) and host_path:
                refs.mounts.append(host_path)
                m = _LIB_VERSION.match(posixpath.basename(host_path))
                if m:
                    refs.driver_versions[host_path] = m.group(1)
        for hook in _list(edit.get("hooks")):
            if not isinstance(hook, dict):
                continue
            if isinstance(hook.get("path"), str) and hook["path"]:
                refs.hooks.append(hook["path"])
            for arg in _list(hook.get("args")):
                m = _HOOK_DRIVER.match(arg) if isinstance(arg, str) else None
                if m:
                    refs.driver_versions[f"hook {arg}"] = m.group(1)
    for items in (refs.device_nodes, refs.mounts, refs.hooks):
        items[:] = list(dict.fromkeys(items))
    return refs


def _vtuple(v: str) -> Tuple[int, ...]:
    try:
        return tuple(int(p) for p in v.split("."))
    except ValueError:
        return ()


def format_problems(data: Dict[str, Any]) -> List[str]:
    """cdiVersion, kind and device names, as container-device-interface validates them."""
    problems = []
    version = data.get("cdiVersion")
    if version not in KNOWN_VERSIONS:
        problems.append(f"unsupported cdiVersion {version!r}")
    kind = data.get("kind")
    if not isinstance(kind, str) or not _KIND.match(kind):
        problems.append(f"invalid kind {kind!r}")
    devices = [d for d in _list(data.get("devices")) if isinstance(d, dict)]
    if not devices:
        problems.append("no devices")
    needs_050 = False
    for dev in devices:
        name = dev.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            problems.append(f"invalid device name {name!r}")
        elif not name[0].isalpha():
            needs_050 = True  # names starting with a digit arrived in v0.5.0 (version.go)
    if any(
        isinstance(n, dict) and n.get("hostPath")
        for e in _edits(data)
        for n in _list(e.get("deviceNodes"))
    ):
        needs_050 = True  # deviceNodes.hostPath arrived in v0.5.0
    if needs_050 and isinstance(version, str) and _vtuple(version) and _vtuple(version) < (0, 5, 0):
        problems.append(
            f"uses v0.5.0 features (digit-leading names or hostPath) but declares {version}"
        )
    return problems


def device_names(data: Dict[str, Any]) -> List[str]:
    return [
        str(d.get("name"))
        for d in _list(data.get("devices"))
        if isinstance(d, dict) and d.get("name")
    ]


def covered_gpu_nodes(data: Dict[str, Any]) -> List[str]:
    """The /dev/nvidiaN nodes of the spec's per-GPU devices (not "all"): one per GPU whatever
    the device-name strategy (index, uuid or both)."""
    nodes = set()
    for dev in _list(data.get("devices")):
        if not isinstance(dev, dict) or dev.get("name") == "all":
            continue
        edits = dev.get("containerEdits")
        for node in _list(edits.get("deviceNodes") if isinstance(edits, dict) else None):
            for key in ("path", "hostPath"):
                value = node.get(key) if isinstance(node, dict) else None
                if isinstance(value, str) and _GPU_NODE.match(value):
                    nodes.add(value)
    return sorted(nodes, key=lambda p: int(_GPU_NODE.match(p).group(1)))  # type: ignore[union-attr]


def discover(host: HostView) -> Tuple[List[str], List[str]]:
    """For collect: the host paths NVIDIA specs reference (presence only)."""
    presence: List[str] = []
    for spec in load_specs(host):
        if spec.data is not None and spec.is_nvidia:
            refs = references(spec.data)
            presence += refs.device_nodes + refs.mounts + refs.hooks
    return [], list(dict.fromkeys(presence))
