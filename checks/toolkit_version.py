"""toolkit-version: NVIDIA Container Toolkit installed, within the path's range, and above the
policy's security floor.

Versions compare with pre-releases below their release (checks/toolkit_release.py).
"""
import re
from typing import Any, Dict, List, Optional, Tuple

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
from checks.rpmdb import (
    BDB_PATH,
    RPMDB_CAP,
    SQLITE_PATHS,
    RpmDbError,
    installed_versions,
    rpm_version,
)
from checks.toolkit_release import Version, parse_version, version_text

CTK_ARGV = ("nvidia-ctk", "--version")
DPKG_STATUS = "/var/lib/dpkg/status"
PACKAGE = "nvidia-container-toolkit"
RPM_QUERY = "rpm -q nvidia-container-toolkit nvidia-container-toolkit-base"
# rpm(8) --queryformat; exits 1 printing "package NAME is not installed" when it is not.
RPM_ARGV = ("rpm", "-q", "--qf", "%{VERSION}-%{RELEASE}\\n", "nvidia-container-toolkit")
_CTK_LINE = re.compile(r"NVIDIA Container Toolkit CLI version\s+(\S+)")
# The minimum is policy data (policy_v1.yaml `toolkit`, which cites it).
MINIMUM = ("NVIDIA Container Toolkit release notes v1.18.0 (CDI generation and the "
           "nvidia-cdi-refresh units the NVIDIA DRA driver for GPUs requires)")
FLOOR_SOURCE = ("policy_v2.yaml toolkit.security_floor: NVIDIA Security Bulletin 5582 "
                "(September 2024, CVE-2024-0132, fixed in 1.16.2) and 5659 (July 2025, "
                "CVE-2025-23266, fixed in 1.17.8)")
def dpkg_version(text: str, package: str) -> Optional[str]:
    """The installed version of ``package`` in a dpkg status file (for --host-root trees):
    its Status's third word must say installed (checks/dpkg.py), not merely contain it."""
    return installed_version(text, package)


def _read_rpmdb(host: HostView, path: str) -> bytes:
    try:  # agent/host/seam.py Host.read_bytes takes a cap; a database is larger than 4 MiB
        return host.read_bytes(path, RPMDB_CAP)  # type: ignore[call-arg]
    except TypeError:
        return host.read_bytes(path)


def _rpm_record(host: HostView) -> Tuple[Optional[str], str, Optional[str]]:
    """(VERSION-RELEASE, source, problem) from `rpm -q` where rpm answers (a live host, or a
    bundle that recorded it), else from rpm's SQLite database if the host has one. Source
    "rpm" with no version: rpm answered that the package is not installed."""
    res = host.run(list(RPM_ARGV), timeout=10)
    if res.ok:
        return res.stdout.strip().splitlines()[0][:64] if res.stdout.strip() else None, \
            "rpm -q", None
    if res.rc == 1 and "is not installed" in res.stdout + res.stderr:
        return None, "rpm", None
    for path in SQLITE_PATHS:
        if not host.is_file(path):
            continue
        try:
            data = _read_rpmdb(host, path)
            if not data:  # a capture that recorded the file's presence only
                continue
            found = installed_versions(data, (PACKAGE,))
        except (OSError, RpmDbError) as exc:
            return None, path, f"{path}: {exc}"
        got = rpm_version(found, PACKAGE)
        return got, path, None
    return None, "", None


def _installed_version(host: HostView) -> Tuple[Optional[Version], str, Optional[str]]:
    """(version, source, problem): problem is set when the answer is "not installed"."""
    res = host.run(list(CTK_ARGV), timeout=10)
    if res.ok:
        m = _CTK_LINE.search(res.stdout)
        return parse_version(m.group(1) if m else None), "nvidia-ctk --version", None
    status = host.read_text_or_none(DPKG_STATUS)
    if status is not None:
        pkg = dpkg_version(status, PACKAGE)
        if pkg:
            return parse_version(pkg), DPKG_STATUS, None
    rpm, source, rpm_problem = _rpm_record(host)
    if rpm:
        return parse_version(rpm), source, None
    if res.not_installed:
        return None, "", "nvidia-ctk not installed"
    if rpm_problem:
        return None, "", f"{rpm_problem}; run `{RPM_QUERY}` on the host"
    if host.is_file(BDB_PATH) and not source:
        return None, BDB_PATH, "bdb"
    return None, "", res.describe()


def below_floor(version: Version, policy: ResolvedPolicy) -> List[Tuple[str, Version]]:
    """(CVE, fixed-in) of each security-floor bound ``version`` is below."""
    out = []
    for bound in policy.policy.toolkit.security_floor:
        fixed = parse_version(bound.fixed_in)
        if fixed is not None and version < fixed:
            out.append((bound.cve, fixed))
    return out


OPERATOR_TOOLKIT_LATE = "operator-toolkit-late"
TOOLKIT_VULNERABLE = "toolkit-vulnerable"
TOOLKIT_RPMDB_UNREADABLE = "toolkit-rpmdb-unreadable"


def _operator_version(
    host: HostView, policy: ResolvedPolicy
) -> Tuple[Optional[Version], str, Optional[str]]:
    """The toolkit the GPU Operator installed under its toolkit root: its own nvidia-ctk."""
    argv = [f"{policy.policy.operator.toolkit_root}/{CTK}", "--version"]
    res = host.run(argv, timeout=10)
    if not res.ok:
        return None, "", res.describe()
    m = _CTK_LINE.search(res.stdout)
    return parse_version(m.group(1) if m else None), " ".join(argv), None


def _floor_outcome(
    version: Version, policy: ResolvedPolicy, details: Dict[str, Any]
) -> Optional[Outcome]:
    hits = below_floor(version, policy)
    if not hits:
        return None
    fix = version_text(max(fixed for _, fixed in hits))
    cves = ", ".join(f"{cve} (fixed in {version_text(fixed)})" for cve, fixed in hits)
    return failed(f"NVIDIA Container Toolkit {version_text(version)} is below the security "
                  f"floor: {cves}; upgrade to {fix} or newer", code=TOOLKIT_VULNERABLE,
                  cves=[cve for cve, _ in hits], security_floor=fix, **details)


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
    minimum = parse_version(tp.minimum_version.get(policy.path))
    need = f">= {version_text(minimum)}" if minimum else "installed"
    if operator and minimum is None and version is None and not tp.security_floor:
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
    if problem == "bdb":
        return unknown(f"nvidia-ctk did not answer and {BDB_PATH} is rpm's BerkeleyDB "
                       f"database (RHEL 8), which the agent does not parse: run "
                       f"`{RPM_QUERY}` on the host", code=TOOLKIT_RPMDB_UNREADABLE,
                       database=BDB_PATH, command=RPM_QUERY)
    if problem:
        return unknown(f"cannot read the toolkit version: {problem}",
                       code="toolkit-version-unreadable")
    if version is None:
        return unknown(f"unrecognised toolkit version output from {source}",
                       code="toolkit-version-unreadable")
    details = {"version": version_text(version), "source": source, "minimum": need}
    floor = _floor_outcome(version, policy, details)
    if floor is not None:
        return floor
    if minimum and version < minimum:
        return failed(
            f"NVIDIA Container Toolkit {version_text(version)} is below {version_text(minimum)} "
            f"required on the {policy.path} path",
            code="toolkit-too-old",
            **details,
        )
    where = f" in {policy.policy.operator.toolkit_root}" if operator else ""
    owner = "GPU Operator toolkit" if operator else "NVIDIA Container Toolkit"
    return passed(f"{owner} {version_text(version)}{where} ({need})", **details)


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
    # rpm's databases by presence only: collect copies reads as text, and a binary SQLite
    # file does not survive that; a bundle made by hand carries the real file.
    presence=TOOLKIT_PRESENCE + SQLITE_PATHS + (BDB_PATH,),
    runs=(CTK_ARGV, OPERATOR_CTK_ARGV, RPM_ARGV),
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
            "`nvidia-ctk --version` failed or printed no version, and neither dpkg's status "
            "file nor rpm's SQLite database records one (or the database cannot be read)",
            "Run `nvidia-ctk --version` (or `" + RPM_QUERY + "`) on the host and repair the "
            "toolkit package.",
            "nvidia-ctk --version (NVIDIA Container Toolkit CLI); dpkg status file (dpkg(1)); "
            "rpm lib/backend/sqlite.c (Packages table) and docs/manual/format_header.md",
        ),
        Failure(
            TOOLKIT_RPMDB_UNREADABLE, Status.UNKNOWN,
            "nvidia-ctk did not answer (a --host-root tree runs no command) and the host's rpm "
            "database is RHEL 8's BerkeleyDB /var/lib/rpm/Packages, which the agent does not "
            "parse",
            "Run `" + RPM_QUERY + "` on the host (or the agent live on it, where nvidia-ctk "
            "answers), and upgrade the toolkit if it is below the path's minimum.",
            "rpm 4.16 release notes (SQLite the default database backend; RHEL 8's rpm 4.14 "
            "uses BerkeleyDB, /var/lib/rpm/Packages)",
        ),
        Failure(
            TOOLKIT_VULNERABLE, Status.FAIL,
            "the NVIDIA Container Toolkit is below the policy's security floor "
            "(toolkit.security_floor, policy version 2): the summary names each CVE",
            "Upgrade the NVIDIA Container Toolkit from NVIDIA's repository to the fixed "
            "version the summary names (or newer), then restart containerd.",
            FLOOR_SOURCE,
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
