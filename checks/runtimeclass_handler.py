"""runtimeclass-handler: RuntimeClass `nvidia` exists and its handler is a runtime containerd has.

Pods ask for `runtimeClassName: nvidia`; the kubelet passes the RuntimeClass's `handler` to
containerd, which must have a runtime of that name (containerd-nvidia-runtime checks the
host side). A missing RuntimeClass fails pod admission ("RuntimeClass "nvidia" not found");
a handler containerd lacks makes the sandbox fail ("no runtime for "x" is configured").
Source: kubernetes.io/docs/concepts/containers/runtime-class/. Reads the API through the
`runtimeclasses` host fact (agent/kube/facts.py); skips when the API is not reachable
(e.g. before `nodeadm init`).

The handler is held against the runtimes in containerd's effective config
(checks/containerd/effective.py: `config dump`, else our merge): a RuntimeClass `nvidia`
whose handler is `nvidia-cdi` passes when containerd has `nvidia-cdi`. Where containerd's
config cannot be judged (absent, unloadable, or the verdict depends on an unknown version),
the handler is compared with `containerd.handler` as before. Under policy version 1 a
handler equal to `containerd.handler` passes even when containerd lacks it
(containerd-nvidia-runtime fails that host); version 2 (`containerd.runtimeclass_effective`)
requires it in containerd's runtimes.
"""

from typing import Any, Dict, List, Optional, Tuple

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
from checks.containerd.config import DEFAULT_CONFIG, DROPIN_GLOBS, discover, table
from checks.containerd.effective import resolve
from checks.containerd.installed import DPKG_STATUS, VERSION_ARGVS, dump_argv
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
    runtimes = containerd_runtimes(host, policy)
    strict = bool(getattr(getattr(policy, "policy", None), "containerd", None)
                  and policy.policy.containerd.runtimeclass_effective)
    details: Dict[str, Any] = {"runtimeclass": name, "handler": actual,
                               "expected_handler": handler, "containerd_runtimes": runtimes}
    if runtimes is not None and actual in runtimes:
        return passed(f"RuntimeClass {name!r} handler {actual!r}: a runtime in containerd's "
                      "effective config", **details)
    if runtimes is not None and (strict or actual != handler):
        return failed(
            f"RuntimeClass {name!r} has handler {actual!r}, which containerd's effective config "
            f"does not have (containerd has: {', '.join(runtimes) or 'none'})",
            remediation=(
                f"Make RuntimeClass {name} use one of containerd's runtimes "
                f"({', '.join(runtimes) or 'none'}; a cluster admin: it is immutable, so delete "
                f"and re-create it), or configure a {actual!r} runtime in containerd "
                "(`nvidia-ctk runtime configure --runtime=containerd`) and restart it."
            ),
            code="handler-mismatch",
            **details,
        )
    if actual != handler:
        return failed(
            f"RuntimeClass {name!r} has handler {actual!r}, containerd's runtime is {handler!r}",
            remediation=(
                f"Make RuntimeClass {name} use handler {handler!r} (a cluster admin: it is "
                f"immutable, so delete and re-create it), or set containerd.handler to "
                f"{actual!r} if that is the runtime containerd has."
            ),
            code="handler-mismatch",
            **details,
        )
    return passed(f"RuntimeClass {name!r} handler {handler!r}", **details)


def containerd_runtimes(host: HostView, policy: ResolvedPolicy) -> Optional[List[str]]:
    """The runtime names in containerd's effective config, or None where it cannot be told
    (config absent or unloadable, or the two merge semantics disagree on the names)."""
    if not isinstance(getattr(policy, "settings", None), dict):
        return None
    ctx = resolve(host, policy)
    names = []
    for view in ctx.views:
        own = view.own
        if view.errors or (own is not None and own.root_missing and view.source.startswith("own")):
            return None
        names.append(sorted(table(view.cri, "containerd", "runtimes")))
    return names[0] if names and all(n == names[0] for n in names) else None


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
    # containerd's effective config, as containerd-nvidia-runtime reads it.
    reads=(DEFAULT_CONFIG, DPKG_STATUS) + DROPIN_GLOBS + ("/etc/containerd/*.toml",),
    runs=VERSION_ARGVS + tuple(dump_argv(a[0], DEFAULT_CONFIG) for a in VERSION_ARGVS),
    discover=discover,
    timeout_s=30.0,
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
            "the RuntimeClass's handler is not a runtime in containerd's effective config "
            "(pod sandboxes fail: no runtime for the handler is configured)",
            "Make the RuntimeClass use one of containerd's runtimes as its handler (a cluster "
            "admin: it is immutable, so delete and re-create it), or configure that runtime in "
            "containerd and restart it.",
            SOURCE + "; containerd docs/cri/config.md (runtimes)",
        ),
    ),
)
