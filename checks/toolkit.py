"""toolkit-version: NVIDIA Container Toolkit installed and within the path's range."""
import re
from typing import Any, Optional, Tuple

from checks.base import (
    ALL_PATHS,
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

CTK_ARGV = ("nvidia-ctk", "--version")
DPKG_STATUS = "/var/lib/dpkg/status"
PACKAGE = "nvidia-container-toolkit"
_CTK_LINE = re.compile(r"NVIDIA Container Toolkit CLI version\s+(\S+)")


def dpkg_version(text: str, package: str) -> Optional[str]:
    """The installed version of ``package`` in a dpkg status file (for --host-root trees)."""
    for stanza in text.split("\n\n"):
        fields = dict(
            line.split(": ", 1) for line in stanza.splitlines() if ": " in line and line[0] != " "
        )
        if fields.get("Package") == package and "installed" in fields.get("Status", ""):
            return fields.get("Version")
    return None


def _installed_version(host: Any) -> Tuple[Optional[Tuple[int, int, int]], str, Optional[str]]:
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


def _toolkit_version(host: Any, policy: Any) -> Outcome:
    tp = policy.policy.toolkit
    if tp.managed_by_operator and policy.path.startswith("operator-"):
        return skipped(f"the GPU Operator installs the toolkit on the {policy.path} path")
    version, source, problem = _installed_version(host)
    minimum = version_tuple(tp.minimum_version.get(policy.path))
    need = f">= {version_str(minimum)}" if minimum else "installed"
    if problem == "nvidia-ctk not installed":
        return failed(
            f"NVIDIA Container Toolkit not installed (the {policy.path} path needs it {need})",
            minimum=need,
        )
    if problem:
        return unknown(f"cannot read the toolkit version: {problem}")
    if version is None:
        return unknown(f"unrecognised toolkit version output from {source}")
    details = {"version": version_str(version), "source": source, "minimum": need}
    if minimum and version < minimum:
        return failed(
            f"NVIDIA Container Toolkit {version_str(version)} is below {version_str(minimum)} "
            f"required on the {policy.path} path",
            **details,
        )
    return passed(f"NVIDIA Container Toolkit {version_str(version)} ({need})", **details)


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
    reads=(DPKG_STATUS,),
    runs=(CTK_ARGV,),
    timeout_s=15.0,
)
