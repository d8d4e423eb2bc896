"""What the API server accepts as a label or annotation from a node identity, checked before
anything is sent (a bad value in the config is exit 2 naming the field, not a 422 or 403 on
every cycle).

Two sources, ported rule for rule:

- k8s.io/apimachinery/pkg/util/validation/validation.go: `IsQualifiedName` (label keys and
  annotation keys: an optional prefix that is a DNS-1123 subdomain of at most 253 characters,
  a name of at most 63 characters matching `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`),
  `IsValidLabelValue` (at most 63 characters, empty allowed, the same pattern), `RegexError`
  (the wording of the messages). Annotation keys are checked lowercased
  (apimachinery/pkg/api/validation/objectmeta.go `ValidateAnnotations`: "case doesn't matter").
- kubernetes plugin/pkg/admission/noderestriction/admission.go `getForbiddenLabels`, with
  k8s.io/kubelet/pkg/apis/well_known_labels.go `IsKubeletLabel`: a node may not set a label
  whose prefix is `node-restriction.kubernetes.io` or a subdomain of it, nor one in the
  `kubernetes.io` / `k8s.io` namespaces (and their subdomains) unless the prefix is
  `kubelet.kubernetes.io` or `node.kubernetes.io` (or a subdomain of either) or the key is one
  of the kubelet's own exact keys. Exact keys, not prefixes: `topology.kubernetes.io/zone` is
  allowed, `topology.kubernetes.io/gpu` is not (both recorded against a v1.34.9 server in
  tests/fixtures/kube-apiserver/; docs/decisions.md "Node label rules").
"""

import re
from typing import List, Optional, Tuple

# apimachinery validation.go
_QUALIFIED_NAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_QUALIFIED_NAME = re.compile(_QUALIFIED_NAME_FMT)
QUALIFIED_NAME_MAX = 63
_LABEL_VALUE_FMT = f"({_QUALIFIED_NAME_FMT})?"
_LABEL_VALUE = re.compile(_LABEL_VALUE_FMT)
LABEL_VALUE_MAX = 63
_DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_FMT = f"{_DNS1123_LABEL_FMT}(\\.{_DNS1123_LABEL_FMT})*"
_DNS1123_SUBDOMAIN = re.compile(_DNS1123_SUBDOMAIN_FMT)
DNS1123_SUBDOMAIN_MAX = 253

# k8s.io/api/core/v1 well_known_labels.go and k8s.io/kubelet/pkg/apis/well_known_labels.go
# (`kubeletLabels`): the exact keys a kubelet sets on its own Node.
KUBELET_LABELS = frozenset(
    {
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/region",
        "beta.kubernetes.io/instance-type",
        "node.kubernetes.io/instance-type",
        "kubernetes.io/os",
        "kubernetes.io/arch",
        "beta.kubernetes.io/os",
        "beta.kubernetes.io/arch",
    }
)
# `kubeletLabelNamespaces`: a label whose prefix is one of these or a subdomain of one.
KUBELET_LABEL_NAMESPACES = ("kubelet.kubernetes.io", "node.kubernetes.io")
NODE_RESTRICTION_NAMESPACE = "node-restriction.kubernetes.io"


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    """apimachinery validation.RegexError, word for word (the server's 422 uses it)."""
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    msg += " (e.g. "
    for i, example in enumerate(examples):
        if i > 0:
            msg += " or "
        msg += f"'{example}', "
    return msg + f"regex used for validation is '{fmt}')"


def _dns1123_subdomain_errors(value: str) -> List[str]:
    errs = []
    if len(value) > DNS1123_SUBDOMAIN_MAX:
        errs.append(f"must be no more than {DNS1123_SUBDOMAIN_MAX} characters")
    if not _DNS1123_SUBDOMAIN.fullmatch(value):
        errs.append(
            _regex_error(
                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                "characters, '-' or '.', and must start and end with an alphanumeric character",
                _DNS1123_SUBDOMAIN_FMT,
                "example.com",
            )
        )
    return errs


def qualified_name_errors(value: str) -> List[str]:
    """apimachinery validation.IsQualifiedName: [] when valid, else the server's messages."""
    errs: List[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs += [f"prefix part {m}" for m in _dns1123_subdomain_errors(prefix)]
    else:
        return [
            "a qualified name "
            + _regex_error(
                "must consist of alphanumeric characters, '-', '_' or '.', "
                "and must start and end with an alphanumeric character",
                _QUALIFIED_NAME_FMT,
                "MyName",
                "my.name",
                "123-abc",
            )
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > QUALIFIED_NAME_MAX:
        errs.append(f"name part must be no more than {QUALIFIED_NAME_MAX} characters")
    if not _QUALIFIED_NAME.fullmatch(name):
        errs.append(
            "name part "
            + _regex_error(
                "must consist of alphanumeric characters, '-', '_' or '.', and must start and "
                "end with an alphanumeric character",
                _QUALIFIED_NAME_FMT,
                "MyName",
                "my.name",
                "123-abc",
            )
        )
    return errs


def label_value_errors(value: str) -> List[str]:
    """apimachinery validation.IsValidLabelValue."""
    errs: List[str] = []
    if len(value) > LABEL_VALUE_MAX:
        errs.append(f"must be no more than {LABEL_VALUE_MAX} characters")
    if not _LABEL_VALUE.fullmatch(value):
        errs.append(
            _regex_error(
                "a valid label must be an empty string or consist of alphanumeric characters, "
                "'-', '_' or '.', and must start and end with an alphanumeric character",
                _LABEL_VALUE_FMT,
                "MyValue",
                "my_value",
                "12345",
            )
        )
    return errs


def annotation_key_errors(key: str) -> List[str]:
    """ValidateAnnotations: IsQualifiedName of the lowercased key."""
    return qualified_name_errors(key.lower())


def _namespace(key: str) -> str:
    # noderestriction getLabelNamespace: the part before the first "/", "" when none.
    return key.split("/", 1)[0] if "/" in key else ""


def _in(namespace: str, root: str) -> bool:
    return namespace == root or namespace.endswith("." + root)


def is_kubelet_label(key: str) -> bool:
    """k8s.io/kubelet/pkg/apis IsKubeletLabel."""
    if key in KUBELET_LABELS:
        return True
    ns = _namespace(key)
    return any(_in(ns, allowed) for allowed in KUBELET_LABEL_NAMESPACES)


def noderestriction_forbids(key: str) -> bool:
    """noderestriction getForbiddenLabels for one modified label key."""
    ns = _namespace(key)
    if _in(ns, NODE_RESTRICTION_NAMESPACE):
        return True
    kubernetes = _in(ns, "kubernetes.io") or _in(ns, "k8s.io")
    return kubernetes and not is_kubelet_label(key)


def label_key_problem(key: str) -> Optional[str]:
    """One line when a node identity cannot set ``key`` on its own Node, else None."""
    errs = qualified_name_errors(key)
    if errs:
        return f"label key {key!r} is not a valid Kubernetes label key: {errs[0]}"
    if noderestriction_forbids(key):
        return (
            f"label key {key!r}: NodeRestriction refuses it to a node identity (keys under "
            "kubernetes.io and k8s.io only under kubelet.kubernetes.io/, node.kubernetes.io/ "
            "or as one of the kubelet's own keys; never node-restriction.kubernetes.io/)"
        )
    return None


def label_value_problem(value: str) -> Optional[str]:
    errs = label_value_errors(value)
    return f"label value {value!r} is not valid: {errs[0]}" if errs else None


def annotation_prefix_problem(prefix: str) -> Optional[str]:
    """The agent writes `<prefix>/managed`, `<prefix>/cordoned` and `<prefix>/unhealthy-gpus`:
    each must be a valid annotation key."""
    for name in ("managed", "cordoned", "unhealthy-gpus"):
        errs = annotation_key_errors(f"{prefix}/{name}")
        if errs:
            return (
                f"annotation prefix {prefix!r}: the key {prefix}/{name} is not a valid "
                f"annotation key: {errs[0]}"
            )
    return None


def kube_settings_problems(kube: object) -> List[Tuple[str, str]]:
    """(field, problem) for every label, value and annotation key in a `kube:` section the
    server would refuse (agent.config validates with this)."""
    out: List[Tuple[str, str]] = []
    for fld in ("allocation_label", "health_label"):
        value = getattr(kube, fld, None)
        if isinstance(value, str):
            problem = label_key_problem(value)
            if problem:
                out.append((fld, problem))
    value = getattr(kube, "allocation_value", None)
    if value:  # empty = the path's name (dra, device-plugin, ...): always valid
        problem = label_value_problem(str(value))
        if problem:
            out.append(("allocation_value", problem))
    prefix = getattr(kube, "annotation_prefix", None)
    if isinstance(prefix, str):
        problem = annotation_prefix_problem(prefix)
        if problem:
            out.append(("annotation_prefix", problem))
    return out
