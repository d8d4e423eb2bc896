"""kubelet-version: kubelet >= the path's minimum (1.34.2 on DRA paths)."""
from checks.base import (
    ALL_PATHS,
    DRA_PATHS,
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
    version_str,
    version_tuple,
)
from checks.policy import ResolvedPolicy

# Canonical Kubernetes (k8s snap) keeps its kubelet off PATH (docs/kubernetes.md).
KUBELET_ARGVS = (("kubelet", "--version"), ("/snap/k8s/current/bin/kubelet", "--version"))
# The minimum is policy data (policy_v1.yaml `kubelet`, which cites it).
MINIMUM = ("Kubernetes 1.34 release (DRA GA); NVIDIA DRA driver for GPUs documents 1.34.2 as "
           "the first supported patch")


def _kubelet_version(host: HostView, policy: ResolvedPolicy) -> Outcome:
    minimum = version_tuple(policy.policy.kubelet.minimum_version.get(policy.path))
    results = [host.run(list(argv), timeout=10) for argv in KUBELET_ARGVS]
    found = next((r for r in results if r.ok), None)
    if found is None:
        if all(r.not_installed for r in results):
            if minimum is None:
                return skipped(f"kubelet not installed (not gated on the {policy.path} path)")
            return failed(
                f"kubelet not installed (the {policy.path} path needs >= {version_str(minimum)})",
                code="kubelet-missing",
            )
        problem = next(r for r in results if not r.not_installed)
        return unknown(f"cannot read the kubelet version: {problem.describe()}",
                       code="kubelet-version-unreadable")
    version = version_tuple(found.stdout)
    if version is None:
        return unknown(f"unrecognised `{' '.join(found.argv)}` output: {found.stdout[:60]!r}",
                       code="kubelet-version-unreadable")
    details = {"version": version_str(version), "binary": found.argv[0]}
    if minimum is None:
        return passed(f"kubelet {version_str(version)} (not gated on the {policy.path} path)",
                      **details)
    if version < minimum:
        return failed(
            f"kubelet {version_str(version)} is below {version_str(minimum)} required for "
            f"DRA on the {policy.path} path",
            code="kubelet-too-old",
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
    failures=(
        Failure(
            "kubelet-missing", Status.FAIL,
            "no kubelet binary on a path that requires a minimum kubelet version",
            "Install kubelet 1.34.2 or newer: on EKS Hybrid Nodes, `nodeadm install 1.34 "
            "--credential-provider <ssm|iam-ra>` then `nodeadm init`; elsewhere install the "
            "kubelet package at the cluster's version.",
            MINIMUM,
        ),
        Failure(
            "kubelet-version-unreadable", Status.UNKNOWN,
            "`kubelet --version` failed or printed no version",
            "Run `kubelet --version` on the host and repair the binary or its package.",
            "kubelet(1) --version (kubernetes.io/docs/reference/command-line-tools-reference/"
            "kubelet/)",
        ),
        Failure(
            "kubelet-too-old", Status.FAIL,
            "the kubelet is older than the allocation path's minimum",
            "Install kubelet 1.34.2 or newer: on EKS Hybrid Nodes, `nodeadm install 1.34 "
            "--credential-provider <ssm|iam-ra>` then `nodeadm init`; elsewhere upgrade the "
            "kubelet package to the cluster's version.",
            MINIMUM,
        ),
    ),
)

assert set(DRA_PATHS) <= set(ALL_PATHS)
