"""Which kubeconfig the agent uses: the one configured, else the kubelet's, wherever the
platform keeps it.

`kube.kubeconfig` left at its default means "the kubelet's own credentials". Platforms keep
them in different places, so the default is a search, in this order:

1. `/var/lib/kubelet/kubeconfig`: EKS and EKS hybrid nodes (nodeadm's kubelet kubeconfig),
   the setting's default since 0.1.0;
2. `/etc/kubernetes/kubelet.conf`: kubeadm (`kubeadm join` writes it; the kubelet drop-in
   10-kubeadm.conf passes `--kubeconfig=/etc/kubernetes/kubelet.conf`) and Canonical
   Kubernetes: canonical/k8s-snap sets the kubelet's `--kubeconfig` to
   `path.Join(snap.KubernetesConfigDir(), "kubelet.conf")` (src/k8s/pkg/k8sd/setup/kubelet.go)
   with KubernetesConfigDir `/etc/kubernetes` (src/k8s/pkg/snap/snap.go), and k8sd writes that
   file with a token for `system:node:<name>` in group `system:nodes`
   (src/k8s/pkg/k8sd/app, setupKubeconfigs): the Node identity NodeRestriction expects.

The first regular file found is used and the report says which (`kubeconfig:` under "node
verdict", `context.kube.kubeconfig` in JSON). A kubeconfig written in the config is used as
given, never replaced by a search: if it does not exist that is the configuration's error,
named by its field.
"""
import os
from typing import Any, Optional, Sequence, Tuple

from agent.kube.kubeconfig import KubeconfigError
from agent.records import record

FIELD = "kube.kubeconfig"
# (path, whose location it is), in search order; the first is the setting's default.
KUBELET_KUBECONFIGS: Tuple[Tuple[str, str], ...] = (
    ("/var/lib/kubelet/kubeconfig", "EKS nodeadm"),
    ("/etc/kubernetes/kubelet.conf", "kubeadm and Canonical Kubernetes"),
)


@record(frozen=True)
class KubeconfigChoice:
    path: str
    source: str  # how it was chosen, for the report


def explicit(kcfg: Any) -> bool:
    """True when the config file names `kube.kubeconfig` (the record's model_fields_set,
    agent/safeio/schema.py); a settings
    object without that record (a test's namespace) counts as explicit: used as given."""
    fields = getattr(kcfg, "model_fields_set", None)
    return fields is None or "kubeconfig" in fields


def choose(kcfg: Any, candidates: Optional[Sequence[Tuple[str, str]]] = None) -> KubeconfigChoice:
    """The kubeconfig to load. Raises KubeconfigError when a configured one does not exist
    (naming the field) or when the search found none (naming where it looked)."""
    configured = str(kcfg.kubeconfig)
    if explicit(kcfg):
        if not os.path.exists(configured):
            raise KubeconfigError(missing_explicit(configured))
        return KubeconfigChoice(configured, f"config {FIELD}")
    found = KUBELET_KUBECONFIGS if candidates is None else tuple(candidates)
    for i, (path, whose) in enumerate(found):
        if os.path.isfile(path):
            if i == 0:
                return KubeconfigChoice(path, f"{FIELD} default ({whose})")
            absent = ", ".join(p for p, _ in found[:i])
            return KubeconfigChoice(path, f"{whose} location; {FIELD} left at its default, "
                                          f"{absent} absent")
    looked = ", ".join(p for p, _ in found)
    raise KubeconfigError(f"no kubelet kubeconfig found (looked at {looked}): the node has not "
                          f"joined yet, or set {FIELD} to the kubelet's --kubeconfig")


def missing_explicit(path: str) -> str:
    return (f"field '{FIELD}': {path}: no such file (a configured kubeconfig is used as given; "
            "leave the field out to use the kubelet's, wherever the platform keeps it)")


def configured_but_missing(config: Any, origin: Optional[str]) -> Optional[str]:
    """`check`'s refusal, one line naming the file and the field, when the config names a
    kubeconfig that does not exist and the Node verdict is on; None otherwise."""
    kcfg = config.kube
    if not kcfg.enabled or not explicit(kcfg) or os.path.exists(str(kcfg.kubeconfig)):
        return None
    return f"{origin or 'built-in config'}: {missing_explicit(str(kcfg.kubeconfig))}"
