"""driver-branch: the loaded driver's branch meets the allocation path's minimum."""
from typing import Any, Dict

from checks.base import (
    ALL_PATHS,
    Check,
    Failure,
    HostView,
    Interval,
    Outcome,
    Severity,
    Status,
    failed,
    not_applicable,
    passed,
    warned,
)
from checks.driver.common import PROC_VERSION, VERSION_UNREADABLE, version_or_outcome
from checks.operator.state import (
    DRIVER_PRESENCE,
    DRIVER_READS,
    driver_discover,
    driver_owned,
    driver_waiting,
    waiting_outcome,
)
from checks.policy import ResolvedPolicy

# The branch minimums and the lifecycle table are policy data; policy_v1.yaml cites each.
LIFECYCLE = ('NVIDIA "Driver Lifecycle" and "Supported Drivers and CUDA Toolkit Versions" '
             "(docs.nvidia.com/datacenter/tesla/drivers/)")
MINIMUMS = ('NVIDIA DRA driver for GPUs, "Prerequisites" (565+); GPU Operator 25.10 release '
            "notes (DRA: 580+); " + LIFECYCLE + " (535 LTSB)")


def _driver_branch(host: HostView, policy: ResolvedPolicy) -> Outcome:
    dp = policy.policy.driver
    if driver_owned(policy):
        if not policy.policy.operator.judge_managed:  # policy version 1's verdict
            return not_applicable(
                f"the GPU Operator installs the driver on the {policy.path} path")
        # The operator's driver is judged against the same minimums once it is there;
        # until then driver-loaded owns the wait (and its grace period).
        waiting = driver_waiting(host, policy)
        if waiting is not None:
            return waiting_outcome(waiting, policy, None)
    version, early = version_or_outcome(host, "driver version")
    if version is None:
        assert early is not None
        return early
    info = dp.branches.get(version.branch)
    kind = {"ltsb": "long-term support", "production": "production", "feature": "new feature"}
    kind_text = (
        f"{kind[info.kind]} branch" if info else "branch not in the policy's lifecycle table"
    )
    eol = info is not None and info.is_past_end_of_life(policy.today)
    details: Dict[str, Any] = {
        "version": version.version,
        "branch": version.branch,
        "flavor": version.flavor,
        "branch_kind": info.kind if info else None,
        "end_of_life": str(info.end_of_life) if info and info.end_of_life else None,
        "past_end_of_life": eol,
        "path": policy.path,
    }
    desc = f"{version.version} ({version.flavor} module), R{version.branch} {kind_text}"
    if driver_owned(policy):
        details["driver_root"] = policy.policy.operator.driver_root
        desc = f"GPU Operator driver {desc}"
    minimum = dp.minimum_branch.get(policy.path)
    if minimum is not None and version.branch < minimum:
        return failed(
            f"{desc}: below the {policy.path} minimum R{minimum}",
            f"Install driver branch R{minimum} or newer (an LTSB such as R580 for production), "
            "reboot, then re-run the check.",
            code="branch-below-minimum",
            minimum_branch=minimum,
            **details,
        )
    if dp.allowed_branches and version.branch not in dp.allowed_branches:
        allowed = ", ".join(f"R{b}" for b in dp.allowed_branches)
        return failed(
            f"{desc}: not an allowed branch ({allowed})",
            f"Install one of the fleet's allowed branches ({allowed}) or change policy.driver."
            "allowed_branches.",
            code="branch-not-allowed",
            **details,
        )
    if eol and policy.path in dp.warn_past_end_of_life_paths:
        return warned(
            f"{desc}: past NVIDIA's end of life"
            + (f" ({info.end_of_life})" if info and info.end_of_life else ""),
            code="branch-past-end-of-life",
            **details,
        )
    meets = f"meets the {policy.path} minimum R{minimum}" if minimum else "no minimum"
    return passed(f"{desc}; {meets}", **details)


DRIVER_BRANCH = Check(
    id="driver-branch",
    title="Driver branch meets the allocation path's minimum",
    severity=Severity.CRITICAL,
    gates=ALL_PATHS,
    interval=Interval.SLOW,
    remediation="Install a driver branch at or above the path's minimum and reboot.",
    run=_driver_branch,
    facts=("node",),  # the GPU Operator's upgrade state (checks/operator/state.py)
    reads=(PROC_VERSION,) + DRIVER_READS,
    presence=DRIVER_PRESENCE,
    discover=driver_discover,
    timeout_s=5.0,
    failures=(
        Failure(
            VERSION_UNREADABLE, Status.UNKNOWN,
            f"{PROC_VERSION} names no NVIDIA driver branch (no NVRM line, or a Jetson/L4T "
            "release)",
            "Check that the data center driver is the one loaded (`cat "
            f"{PROC_VERSION}`); Jetson/L4T boards are not supported hosts.",
            "NVIDIA kernel module's /proc/driver/nvidia/version (open and proprietary "
            "flavours: tests/fixtures/PROVENANCE.md)",
        ),
        Failure(
            "branch-below-minimum", Status.FAIL,
            "the driver branch is below the allocation path's minimum",
            "Install a driver branch at or above the path's minimum (an LTSB such as R580 for "
            "production), reboot, then re-run the check.",
            MINIMUMS,
        ),
        Failure(
            "branch-not-allowed", Status.FAIL,
            "the driver branch is not one of policy.driver.allowed_branches",
            "Install one of the fleet's allowed branches or change "
            "policy.driver.allowed_branches.",
            "the fleet's own policy (policy.driver.allowed_branches in the config)",
        ),
        Failure(
            "branch-past-end-of-life", Status.WARN,
            "the driver branch is past NVIDIA's end of life",
            "Plan an upgrade to a supported branch (R580 LTSB); an ended branch gets no "
            "security fixes.",
            LIFECYCLE,
        ),
    ),
)
