"""kubelet-version: kubelet >= the path's minimum (1.34.2 on DRA paths)."""
from typing import Any

from checks.base import (
    ALL_PATHS,
    DRA_PATHS,
    Check,
    Interval,
    Outcome,
    Severity,
    failed,
    passed,
    skipped,
    unknown,
    version_str,
    version_tuple,
)

# Canonical Kubernetes (k8s snap) keeps its kubelet off PATH (docs/kubernetes.md).
KUBELET_ARGVS = (("kubelet", "--version"), ("/snap/k8s/current/bin/kubelet", "--version"))


def _kubelet_version(host: Any, policy: Any) -> Outcome:
    minimum = version_tuple(policy.policy.kubelet.minimum_version.get(policy.path))
    results = [host.run(list(argv), timeout=10) for argv in KUBELET_ARGVS]
    found = next((r for r in results if r.ok), None)
    if found is None:
        if all(r.not_installed for r in results):
            if minimum is None:
                return skipped(f"kubelet not installed (not gated on the {policy.path} path)")
            return failed(
                f"kubelet not installed (the {policy.path} path needs >= {version_str(minimum)})"
            )
        problem = next(r for r in results if not r.not_installed)
        return unknown(f"cannot read the kubelet version: {problem.describe()}")
    version = version_tuple(found.stdout)
    if version is None:
        return unknown(f"unrecognised `{' '.join(found.argv)}` output: {found.stdout[:60]!r}")
    details = {"version": version_str(version), "binary": found.argv[0]}
    if minimum is None:
        return passed(f"kubelet {version_str(version)} (not gated on the {policy.path} path)",
                      **details)
    if version < minimum:
        return failed(
            f"kubelet {version_str(version)} is below {version_str(minimum)} required for "
            f"DRA on the {policy.path} path",
            minimum=version_str(minimum),
            **details,
        )
    return passed(f"kubelet {version_str(version)} >= {version_str(minimum)}", **details)


KUBELET_VERSION = Check(
    id="kubelet-version",
    title="kubelet version supports the allocation path",
    severity=Severity.CRITICAL,
    gates=DRA_PATHS,
    interval=Interval.BOOTSTRAP,
    remediation=(
        "Install kubelet 1.34.2 or newer: on EKS Hybrid Nodes, `nodeadm install 1.34 "
        "--credential-provider <ssm|iam-ra>` then `nodeadm init`; elsewhere upgrade the "
        "kubelet package to the cluster's version."
    ),
    run=_kubelet_version,
    runs=KUBELET_ARGVS,
    timeout_s=15.0,
)

assert set(DRA_PATHS) <= set(ALL_PATHS)
