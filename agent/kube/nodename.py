"""The Node name: the one the kubelet registered, found in the order docs/kubernetes.md gives.

1. the config (`kube.node_name`);
2. nodeadm's NodeConfig `spec.hybrid.nodeName` (on SSM hybrid nodes an `mi-...` managed
   instance id, not the hostname);
3. the kubelet's `--hostname-override` in its args/environment files;
4. the CN of the kubelet client certificate (`system:node:<name>`, the identity the Node
   authorizer uses, so it is the name the node may write);
5. the hostname, lowercased as the kubelet does (k8s.io/component-helpers nodeutil.GetHostname).

All reads go through the Host seam, so a fixture tree exercises every branch. Every file is
input (a bundle, a hand-edited host): the lookup never raises on one. A name is what the
kubelet would register: trimmed and lowercased (nodeutil.GetHostname), and it must be a Node
name the API server accepts (an RFC 1123 DNS subdomain, apimachinery's
IsDNS1123Subdomain); the first source that names the node decides, so an invalid name
there is reported, not passed over for a lower-priority guess.
"""

import re
import shlex
from typing import Any, Iterable, List, Optional, Tuple

from agent.kube.keymaterial import client_cert_cn
from agent.safeio.yamlio import YamlError, safe_load_all

# nodeadm reads its NodeConfig from `nodeadm init --config-source file://<file or dir>`;
# a directory's documents merge in file-name order (so the last nodeName wins). The first
# entry is where this project's Ansible role keeps it (gpu_node_agent_nodeadm_config_source);
# the others are common choices. Configurable: kube.nodeadm_config_paths.
NODEADM_CONFIGS = (
    "/etc/eks/nodeadm.d",
    "/etc/eks/nodeadm/nodeConfig.yaml",
    "/etc/eks/nodeadm/config.yaml",
    "/etc/nodeadm/nodeConfig.yaml",
)
# Where kubelet flags live: nodeadm's environment file, kubeadm's flags file, distro
# defaults files, Canonical Kubernetes' args file (docs/kubernetes.md).
KUBELET_ARGS_FILES = (
    "/etc/eks/kubelet/environment",
    "/var/lib/kubelet/kubeadm-flags.env",
    "/etc/default/kubelet",
    "/etc/sysconfig/kubelet",
    "/var/snap/k8s/common/args/kubelet",
)
KUBELET_CLIENT_CERTS = (
    "/var/lib/kubelet/pki/kubelet-client-current.pem",
    "/var/snap/k8s/common/var/lib/kubelet/pki/kubelet-client-current.pem",
)
_OVERRIDE = re.compile(r"--hostname-override(?:=|\s+)(\S+)")
_NODE_CN = "system:node:"
# k8s.io/apimachinery/pkg/util/validation: DNS1123SubdomainMaxLength 253, labels of
# [a-z0-9]([-a-z0-9]*[a-z0-9])? joined by dots.
_DNS_SUBDOMAIN = re.compile(
    r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*"
)


def node_name_problem(name: str) -> Optional[str]:
    """Why ``name`` cannot be a Node's name, or None when it can."""
    if len(name) > 253:
        return "longer than 253 characters"
    if not name.isascii() or not _DNS_SUBDOMAIN.fullmatch(name):
        return "not a DNS subdomain (lowercase letters, digits, '-' and '.')"
    return None


def _nodeadm_name(text: str) -> Optional[str]:
    """spec.hybrid.nodeName from a NodeConfig (a YAML document, or a multi-doc / MIME file
    where the NodeConfig is one YAML document among others)."""
    try:
        docs = list(safe_load_all(text))  # bounded: depth, alias expansion, integers
    except YamlError:
        return None
    for doc in docs:
        if isinstance(doc, dict) and doc.get("kind") == "NodeConfig":
            spec = doc.get("spec")
            hybrid = (spec.get("hybrid") if isinstance(spec, dict) else None) or {}
            name = hybrid.get("nodeName") if isinstance(hybrid, dict) else None
            # nodeName is a string in NodeConfig; a list or mapping there names no node.
            if isinstance(name, str) and name.strip():
                return name.strip()
    return None


def hostname_override(text: str) -> Optional[str]:
    """The last --hostname-override in an args/env file (the kubelet honours the last)."""
    found = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            words = line.split()
        # KEY="--a --hostname-override=x" (an env file) and one flag per line (the snap's
        # args file) both become plain words here.
        joined = " ".join(words)
        for m in _OVERRIDE.finditer(joined):
            found = m.group(1).strip("\"'")
    return found or None


def _cert_name(pem: Optional[bytes]) -> Optional[str]:
    if not pem:
        return None
    cn = client_cert_cn(pem)
    if cn and cn.startswith(_NODE_CN) and len(cn) > len(_NODE_CN):
        return cn[len(_NODE_CN) :]
    return None


def _checked(name: str, source: str) -> Tuple[Optional[str], str]:
    name = name.strip().lower()
    problem = node_name_problem(name)
    if problem:
        shown = name[:64].encode("ascii", "backslashreplace").decode("ascii")
        return None, f"{source} names {shown!r}, {problem}: set kube.node_name in the config"
    return name, source


def resolve_node_name(
    host: Any,
    configured: Optional[str] = None,
    nodeadm_paths: Iterable[str] = NODEADM_CONFIGS,
    args_files: Iterable[str] = KUBELET_ARGS_FILES,
    cert_paths: Iterable[str] = KUBELET_CLIENT_CERTS,
) -> Tuple[Optional[str], str]:
    """(name, where it came from); (None, why) when nothing names the node."""
    if configured:
        return configured, "config kube.node_name"
    for path in nodeadm_paths:
        entries = sorted(host.listdir(path))
        files = [f"{path.rstrip('/')}/{e}" for e in entries] if entries else [path]
        found = None
        for file in files:
            text = host.read_text_or_none(file)
            name = _nodeadm_name(text) if text else None
            found = (name, file) if name else found
        if found:
            return _checked(found[0], f"nodeadm NodeConfig spec.hybrid.nodeName ({found[1]})")
    for path in args_files:
        text = host.read_text_or_none(path)
        name = hostname_override(text) if text else None
        if name:
            return _checked(name, f"kubelet --hostname-override ({path})")
    for path in cert_paths:
        try:
            pem: Optional[bytes] = host.read_bytes(path)
        except (OSError, ValueError):
            pem = None
        name = _cert_name(pem)
        if name:
            return _checked(name, f"kubelet client certificate CN ({path})")
    hostname = host.hostname()
    if hostname and hostname.strip():
        return _checked(hostname, "hostname")
    return None, "no node name: set kube.node_name in the config"


def node_identity(kcfg: Any, host: Any) -> Tuple[Optional[str], str]:
    """The Node identity for the kube settings ``kcfg``, read from ``host``. Only the
    composition root calls it (agent/cli_kube.py), once per session, with the Host it built:
    the session, the facts and the publisher are handed the answer."""
    paths = kcfg.nodeadm_config_paths or NODEADM_CONFIGS
    return resolve_node_name(host, kcfg.node_name, nodeadm_paths=paths)


def candidates_read(
    nodeadm_paths: Iterable[str] = NODEADM_CONFIGS,
    args_files: Iterable[str] = KUBELET_ARGS_FILES,
    cert_paths: Iterable[str] = KUBELET_CLIENT_CERTS,
) -> List[str]:
    """Every file the resolution may read (for `collect`)."""
    return [*nodeadm_paths, *args_files, *cert_paths, "/proc/sys/kernel/hostname", "/etc/hostname"]
