"""os-supported: distribution and version in the support matrix (warning only)."""
import shlex
from typing import Dict, Optional

from checks.base import (
    ALL_PATHS,
    Check,
    Failure,
    HostView,
    Interval,
    Outcome,
    Severity,
    Status,
    passed,
    unknown,
    warned,
)
from checks.policy import ResolvedPolicy

OS_RELEASE_FILES = ("/etc/os-release", "/usr/lib/os-release")  # os-release(5) search order
KERNEL_RELEASE = "/proc/sys/kernel/osrelease"
# The support matrix is policy data (policy_v1.yaml `os`, which cites it).
MATRIX = ("EKS Hybrid Nodes supported operating systems "
          "(docs.aws.amazon.com/eks/latest/userguide/hybrid-nodes-os.html) intersected with the "
          "NVIDIA data center driver's")


def parse_os_release(text: str) -> Dict[str, str]:
    """KEY=value lines with shell quoting (os-release(5)); malformed lines are ignored."""
    fields: Dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, raw = line.partition("=")
        try:
            parts = shlex.split(raw)
        except ValueError:
            continue
        fields[key.strip()] = parts[0] if parts else ""
    return fields


def _major_for(os_id: str, version_id: str) -> str:
    # RHEL's VERSION_ID is "9.4": the support matrix is per major release.
    return version_id.split(".")[0] if os_id == "rhel" else version_id


def _os_supported(host: HostView, policy: ResolvedPolicy) -> Outcome:
    text: Optional[str] = None
    for path in OS_RELEASE_FILES:
        text = host.read_text_or_none(path)
        if text is not None:
            break
    if text is None:
        return unknown("no /etc/os-release or /usr/lib/os-release on this host",
                       code="os-unidentified")
    fields = parse_os_release(text)
    os_id, version_id = fields.get("ID", ""), fields.get("VERSION_ID", "")
    kernel = (host.read_text_or_none(KERNEL_RELEASE) or "").strip() or None
    name = fields.get("PRETTY_NAME") or f"{os_id} {version_id}".strip()
    details = {"id": os_id, "version_id": version_id, "pretty_name": name, "kernel": kernel}
    if not os_id:
        return unknown("os-release has no ID field", code="os-unidentified", **details)
    version = _major_for(os_id, version_id)
    matrix = policy.policy.os
    if any(e.id == os_id and version in e.versions for e in matrix.supported):
        return passed(f"{name} is supported", **details)
    if any(e.id == os_id and version in e.versions for e in matrix.deprecated):
        return warned(f"{name} is deprecated: supported with warnings only", code="os-deprecated",
                      **details)
    supported = ", ".join(f"{e.id} {'/'.join(e.versions)}" for e in matrix.supported)
    return warned(f"{name} is not in the support matrix ({supported})", code="os-unsupported",
                  **details)


OS_SUPPORTED = Check(
    id="os-supported",
    title="Operating system in the support matrix",
    severity=Severity.WARNING,
    gates=ALL_PATHS,
    interval=Interval.BOOTSTRAP,
    remediation=(
        "Use a supported OS (Ubuntu 22.04/24.04, RHEL 8/9, Amazon Linux 2023); other "
        "distributions may work but are not validated by NVIDIA and EKS Hybrid Nodes together."
    ),
    run=_os_supported,
    reads=OS_RELEASE_FILES + (KERNEL_RELEASE,),
    timeout_s=5.0,
    failures=(
        Failure(
            "os-unidentified", Status.UNKNOWN,
            "no os-release file, or one without an ID field: the distribution is not known",
            "Restore /etc/os-release (or /usr/lib/os-release) from the distribution's base "
            "package; os-release(5) requires ID.",
            "os-release(5)",
        ),
        Failure(
            "os-deprecated", Status.WARN,
            "the distribution and version are on the deprecated list of the support matrix",
            "Plan a move to a supported OS (Ubuntu 22.04/24.04, RHEL 8/9, Amazon Linux 2023).",
            MATRIX,
        ),
        Failure(
            "os-unsupported", Status.WARN,
            "the distribution and version are not in the support matrix",
            "Use a supported OS (Ubuntu 22.04/24.04, RHEL 8/9, Amazon Linux 2023); other "
            "distributions may work but are not validated by NVIDIA and EKS Hybrid Nodes "
            "together.",
            MATRIX,
        ),
    ),
)
