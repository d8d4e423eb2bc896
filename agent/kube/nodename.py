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
from typing import Any, Iterable, List, Optional, Tuple

from agent.kube.keymaterial import client_cert_cn
from agent.safeio.kubelet_args import args_words
from agent.safeio.nodeadm import (
    KUBELET_ARGS_FILES,
    NODEADM_CONFIGS,
    hybrid_node_name,
    read_sources,
)

# NODEADM_CONFIGS (kube.nodeadm_config_paths overrides) and KUBELET_ARGS_FILES, and how nodeadm
# reads a source (a file, a directory merged in file-name order, MIME multi-part user data):
# agent/safeio/nodeadm.py, which the registration-labels check reads them through too.
__all__ = ["KUBELET_ARGS_FILES", "KUBELET_CLIENT_CERTS", "NODEADM_CONFIGS", "candidates_read",
           "hostname_override", "node_identity", "node_name_problem", "resolve_node_name"]
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


def hostname_override(text: str) -> Optional[str]:
    """The last --hostname-override in an args/env file (the kubelet honours the last)."""
    found = None
    # KEY="--a --hostname-override=x" (an env file) and one flag per line (the snap's args
    # file) both become plain words (agent/safeio/nodeadm.py args_words).
    for m in _OVERRIDE.finditer(" ".join(args_words(text))):
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
    for source in read_sources(host, nodeadm_paths):
        # Documents merge in file-name order (later nodeName overrides earlier: nodeadm's
        # mergo.WithOverride), so the last one that names the node decides.
        found = None
        for file in source.files:
            for doc in file.configs:
                name = hybrid_node_name(doc)
                found = (name, file.path) if name else found
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
