"""runtimeclass-handler: RuntimeClass `nvidia` exists and its handler is containerd's.

Pods ask for `runtimeClassName: nvidia`; the kubelet passes the RuntimeClass's `handler` to
containerd, which must have a runtime of that name (containerd-nvidia-runtime checks the
host side). A missing RuntimeClass fails pod admission ("RuntimeClass "nvidia" not found");
a handler that does not match makes the sandbox fail ("no runtime for "x" is configured").
Source: kubernetes.io/docs/concepts/containers/runtime-class/. Reads the API through the
`runtimeclasses` host fact (agent/kube/facts.py); skips when the API is not reachable
(e.g. before `nodeadm init`).
"""

from typing import Any, Dict, List, Tuple

from checks.base import (
    RUNTIME_HANDLER_PATHS,
    Check,
    Failure,
    HostView,
    Interval,
    Outcome,
    Severity,
    Status,
    failed,
    passed,
    skipped,
    unknown,
)
from checks.policy import ResolvedPolicy

DEFAULT_NAME = "nvidia"
SOURCE = "kubernetes.io/docs/concepts/containers/runtime-class/"


def _settings(policy: ResolvedPolicy) -> Tuple[str, str]:
    settings = getattr(policy, "settings", {}) or {}
    handler = str((settings.get("containerd") or {}).get("handler") or "nvidia")
    name = str((settings.get("kube") or {}).get("runtimeclass") or DEFAULT_NAME)
    return name, handler


def _runtimeclass_handler(host: HostView, policy: ResolvedPolicy) -> Outcome:
    name, handler = _settings(policy)
    fact = host.fact("runtimeclasses")
    if fact is None:
        return skipped("RuntimeClasses not captured for this host (needs the Kubernetes API)",
                       kind="input-missing")
    if not isinstance(fact, dict):
        return unknown(f"unexpected runtimeclasses fact: {type(fact).__name__}",
                       code="runtimeclasses-malformed")
    if "error" in fact:
        return skipped(f"Kubernetes API not reachable: {str(fact['error'])[:200]}",
                       kind="input-missing")
    items: List[Dict[str, Any]] = [i for i in fact.get("items") or [] if isinstance(i, dict)]
    found = next((i for i in items if (i.get("metadata") or {}).get("name") == name), None)
    names = sorted(str((i.get("metadata") or {}).get("name")) for i in items)
    if found is None:
        return failed(
            f"RuntimeClass {name!r} not found (cluster has: {', '.join(names) or 'none'})",
            code="runtimeclass-missing",
            runtimeclasses=names,
        )
    actual = found.get("handler")
    if actual != handler:
        return failed(
            f"RuntimeClass {name!r} has handler {actual!r}, containerd's runtime is {handler!r}",
            remediation=(
                f"Make RuntimeClass {name} use handler {handler!r} (a cluster admin: it is "
                f"immutable, so delete and re-create it), or set containerd.handler to "
                f"{actual!r} if that is the runtime containerd has."
            ),
            code="handler-mismatch",
            runtimeclass=name,
            handler=actual,
            expected_handler=handler,
        )
    return passed(f"RuntimeClass {name!r} handler {handler!r}", runtimeclass=name, handler=actual)


RUNTIMECLASS_HANDLER = Check(
    id="runtimeclass-handler",
    title="RuntimeClass nvidia exists and uses containerd's handler",
    severity=Severity.CRITICAL,
    gates=RUNTIME_HANDLER_PATHS,
    interval=Interval.SLOW,
    remediation=(
        "A cluster admin creates it: `kubectl apply -f -` with apiVersion node.k8s.io/v1, "
        "kind RuntimeClass, metadata.name nvidia, handler nvidia (the GPU Operator and the "
        "device plugin's Helm chart create it too). A node cannot: its identity may only "
        "read RuntimeClasses."
    ),
    run=_runtimeclass_handler,
    facts=("runtimeclasses",),
    timeout_s=15.0,
    failures=(
        Failure(
            "runtimeclasses-malformed", Status.UNKNOWN,
            "the runtimeclasses fact is not the RuntimeClassList the API returns",
            "Capture the RuntimeClasses again (`gpu-node-agent collect` on the node, with the "
            "API reachable); a bundle edited by hand must keep the API's list shape.",
            SOURCE,
        ),
        Failure(
            "runtimeclass-missing", Status.FAIL,
            "the cluster has no RuntimeClass of the configured name (pods asking for it are "
            "not admitted)",
            "A cluster admin creates it: `kubectl apply -f -` with apiVersion node.k8s.io/v1, "
            "kind RuntimeClass, metadata.name nvidia, handler nvidia (the GPU Operator and the "
            "device plugin's Helm chart create it too). A node cannot: its identity may only "
            "read RuntimeClasses.",
            SOURCE,
        ),
        Failure(
            "handler-mismatch", Status.FAIL,
            "the RuntimeClass's handler is not the runtime containerd has (pod sandboxes fail)",
            "Make the RuntimeClass use containerd's runtime name as its handler (a cluster "
            "admin: it is immutable, so delete and re-create it), or set containerd.handler to "
            "the runtime containerd has.",
            SOURCE,
        ),
    ),
)
