"""Label key rules: Kubernetes syntax (apimachinery validation.IsQualifiedName) and what
NodeRestriction lets a node identity set on its own Node (plugin/pkg/admission/noderestriction:
no `node-restriction.kubernetes.io/` key, and in the kubernetes.io / k8s.io namespaces only
the kubelet's own labels)."""

import re
from typing import Optional

_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# k8s.io/kubelet/pkg/apis well_known_labels.go: the kubernetes.io labels a kubelet may set.
KUBELET_ALLOWED = ("kubelet.kubernetes.io/", "node.kubernetes.io/")


def label_key_problem(key: str) -> Optional[str]:
    prefix, slash, name = key.rpartition("/")
    if not _NAME.match(name):
        return f"label key {key!r}: name part must be 1-63 alphanumerics, '-', '_', '.'"
    if slash and (len(prefix) > 253 or not _DNS1123.match(prefix)):
        return f"label key {key!r}: prefix must be a DNS subdomain"
    if prefix == "node-restriction.kubernetes.io" or prefix.endswith(
        ".node-restriction.kubernetes.io"
    ):
        return f"label key {key!r}: NodeRestriction forbids a node to set this namespace"
    in_k8s = prefix in ("kubernetes.io", "k8s.io") or prefix.endswith((".kubernetes.io", ".k8s.io"))
    if in_k8s and not key.startswith(KUBELET_ALLOWED):
        return f"label key {key!r}: NodeRestriction forbids nodes to set labels in {prefix}"
    return None
