"""toolkit-version: NVIDIA Container Toolkit installed and within the path's range."""
import re
from typing import Optional, Tuple

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
    passed,
    skipped,
    unknown,
    version_str,
    version_tuple,
)
from checks.dpkg import installed_version
from checks.operator.state import (
    CTK,
    OPERATOR_CTK_ARGV,
    PROC_UPTIME,
    TOOLKIT_PRESENCE,
    VALIDATOR_SOURCE,
    toolkit_owned,
    toolkit_waiting,
    waiting_outcome,
)
from checks.policy import ResolvedPolicy

CTK_ARGV = ("nvidia-ctk", "--version")
DPKG_STATUS = "/var/lib/dpkg/status"
PACKAGE = "nvidia-container-toolkit"
_CTK_LINE = re.compile(r"NVIDIA Container Toolkit CLI version\s+(\S+)")
# The minimum is policy data (policy_v1.yaml `toolkit`, which cites it).
MINIMUM = ("NVIDIA Container Toolkit release notes v1.18.0 (CDI generation and the "
           "nvidia-cdi-refresh units the NVIDIA DRA driver for GPUs requires)")


def dpkg_version(text: str, package: str) -> Optional[str]:
    """The installed version of ``package`` in a dpkg status file (for --host-root trees):
    its Status's third word must say installed (checks/dpkg.py), not merely contain it."""
    return installed_version(text, package)


def _installed_version(host: HostView) -> Tuple[Optional[Tuple[int, int, int]], str, Optional[str]]:
    """(version, source, problem): problem is set when the answer is "not installed"."""
    res = host.run(list(CTK_ARGV), timeout=10)
    if res.ok:
        m = _CTK_LINE.search(res.stdout)
        return version_tuple(m.group(1) if m else None), "nvidia-ctk --version", None
    status = host.read_text_or_none(DPKG_STATUS)
    if status is not None:
        pkg = dpkg_version(status, PACKAGE)
        if pkg:
            return version_tuple(pkg), DPKG_STATUS, None
    if res.not_installed:
        return None, "", "nvidia-ctk not installed"
    return None, "", res.describe()


OPERATOR_TOOLKIT_LATE = "operator-toolkit-late"


def _operator_version(
    host: HostView, policy: ResolvedPolicy
) -> Tuple[Optional[Tuple[int, int, int]], str, Optional[str]]:
    """The toolkit the GPU Operator installed under its toolkit root: its own nvidia-ctk."""
    argv = [f"{policy.policy.operator.toolkit_root}/{CTK}", "--version"]
    res = host.run(argv, timeout=10)
    if not res.ok:
        return None, "", res.describe()
    m = _CTK_LINE.search(res.stdout)
    return version_tuple(m.group(1) if m else None), " ".join(argv), None


def _toolkit_version(host: HostView, policy: ResolvedPolicy) -> Outcome:
    tp = policy.policy.toolkit
    operator = False
    if toolkit_owned(policy):
        if not policy.policy.operator.judge_managed:  # policy version 1's verdict
            return skipped(f"the GPU Operator installs the toolkit on the {policy.path} path")
        waiting = toolkit_waiting(host, policy)
        if waiting is not None:
            return waiting_outcome(waiting, policy, OPERATOR_TOOLKIT_LATE)
        operator = True
    if operator:
        version, source, problem = _operator_version(host, policy)
    else:
        version, source, problem = _installed_version(host)
    minimum = version_tuple(tp.minimum_version.get(policy.path))
    need = f">= {version_str(minimum)}" if minimum else "installed"
    if operator and minimum is None and version is None:
        # "installed" is this path's whole requirement and the runtime is there.
        root = policy.policy.operator.toolkit_root
        return passed(f"GPU Operator toolkit installed in {root} (version not read: "
                      f"{problem or 'unrecognised output'})", toolkit_root=root, minimum=need)
    if problem == "nvidia-ctk not installed":
        return failed(
            f"NVIDIA Container Toolkit not installed (the {policy.path} path needs it {need})",
            code="toolkit-missing",
            minimum=need,
        )
    if problem:
        return unknown(f"cannot read the toolkit version: {problem}",
                       code="toolkit-version-unreadable")
    if version is None:
        return unknown(f"unrecognised toolkit version output from {source}",
                       code="toolkit-version-unreadable")
    details = {"version": version_str(version), "source": source, "minimum": need}
    if minimum and version < minimum:
        return failed(
            f"NVIDIA Container Toolkit {version_str(version)} is below {version_str(minimum)} "
            f"required on the {policy.path} path",
            code="toolkit-too-old",
            **details,
        )
    where = f" in {policy.policy.operator.toolkit_root}" if operator else ""
    owner = "GPU Operator toolkit" if operator else "NVIDIA Container Toolkit"
    return passed(f"{owner} {version_str(version)}{where} ({need})", **details)


TOOLKIT_VERSION = Check(
    id="toolkit-version",
    title="NVIDIA Container Toolkit installed at a supported version",
    severity=Severity.CRITICAL,
    gates=ALL_PATHS,
    interval=Interval.BOOTSTRAP,
    remediation=(
        "Install or upgrade the NVIDIA Container Toolkit from NVIDIA's repository "
        "(`apt-get install nvidia-container-toolkit` / `dnf install nvidia-container-toolkit`), "
        "version 1.18 or newer on DRA paths, then run `nvidia-ctk runtime configure "
        "--runtime=containerd` and restart containerd."
    ),
    run=_toolkit_version,
    reads=(DPKG_STATUS, PROC_UPTIME),
    presence=TOOLKIT_PRESENCE,
    runs=(CTK_ARGV, OPERATOR_CTK_ARGV),
    timeout_s=15.0,
    failures=(
        Failure(
            "toolkit-missing", Status.FAIL,
            "the NVIDIA Container Toolkit is not installed (no nvidia-ctk, no dpkg record)",
            "Install the NVIDIA Container Toolkit from NVIDIA's repository "
            "(`apt-get install nvidia-container-toolkit` / `dnf install "
            "nvidia-container-toolkit`), then run `nvidia-ctk runtime configure "
            "--runtime=containerd` and restart containerd.",
            MINIMUM,
        ),
        Failure(
            "toolkit-version-unreadable", Status.UNKNOWN,
            "`nvidia-ctk --version` failed or printed no version, and dpkg records none",
            "Run `nvidia-ctk --version` on the host and repair the toolkit package.",
            "nvidia-ctk --version (NVIDIA Container Toolkit CLI); dpkg status file (dpkg(1))",
        ),
        Failure(
            "toolkit-too-old", Status.FAIL,
            "the NVIDIA Container Toolkit is older than the allocation path's minimum",
            "Upgrade the NVIDIA Container Toolkit from NVIDIA's repository to 1.18 or newer "
            "on DRA paths, then run `nvidia-ctk runtime configure --runtime=containerd` and "
            "restart containerd.",
            MINIMUM,
        ),
        Failure(
            OPERATOR_TOOLKIT_LATE, Status.FAIL,
            "the GPU Operator installs the toolkit on this path and nvidia-container-runtime "
            "is still not in its toolkit directory past policy.operator.grace_period_s since "
            "boot",
            "See why the operator's nvidia-container-toolkit-daemonset pod on this node is not "
            "ready (its logs; it waits for the driver's driver-ready marker first). If this "
            "node should use a host-installed toolkit, set policy.toolkit.managed_by_operator: "
            "false.",
            "NVIDIA/nvidia-container-toolkit cmd/nvidia-ctk-installer/main.go (installs into "
            "<toolkit-install-dir>/toolkit, default /usr/local/nvidia); " + VALIDATOR_SOURCE,
        ),
    ),
)
