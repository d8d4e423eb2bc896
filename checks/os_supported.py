"""os-supported: distribution and version in the support matrix (warning only)."""
import shlex
from typing import Any, Dict, Optional

from checks.base import ALL_PATHS, Check, Interval, Outcome, Severity, passed, unknown, warned

OS_RELEASE_FILES = ("/etc/os-release", "/usr/lib/os-release")  # os-release(5) search order
KERNEL_RELEASE = "/proc/sys/kernel/osrelease"


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


def _os_supported(host: Any, policy: Any) -> Outcome:
    text: Optional[str] = None
    for path in OS_RELEASE_FILES:
        text = host.read_text_or_none(path)
        if text is not None:
            break
    if text is None:
        return unknown("no /etc/os-release or /usr/lib/os-release on this host")
    fields = parse_os_release(text)
    os_id, version_id = fields.get("ID", ""), fields.get("VERSION_ID", "")
    kernel = (host.read_text_or_none(KERNEL_RELEASE) or "").strip() or None
    name = fields.get("PRETTY_NAME") or f"{os_id} {version_id}".strip()
    details = {"id": os_id, "version_id": version_id, "pretty_name": name, "kernel": kernel}
    if not os_id:
        return unknown("os-release has no ID field", **details)
    version = _major_for(os_id, version_id)
    matrix = policy.policy.os
    if any(e.id == os_id and version in e.versions for e in matrix.supported):
        return passed(f"{name} is supported", **details)
    if any(e.id == os_id and version in e.versions for e in matrix.deprecated):
        return warned(f"{name} is deprecated: supported with warnings only", **details)
    supported = ", ".join(f"{e.id} {'/'.join(e.versions)}" for e in matrix.supported)
    return warned(f"{name} is not in the support matrix ({supported})", **details)


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
)
