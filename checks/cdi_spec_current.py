"""cdi-spec-current: every NVIDIA CDI spec parses, is a supported version, references only
host paths that exist (a spec generated before a driver upgrade names libraries with the old
version suffix: stale), and the host-wide nvidia.com/gpu spec covers every GPU.
"""

import posixpath
import re
from typing import Any, Dict, List, Optional, Tuple

from checks.base import (
    ALL_PATHS,
    Check,
    Interval,
    Outcome,
    Severity,
    failed,
    passed,
    skipped,
    warned,
)
from checks.cdi_specs import (
    CDI_DIRS,
    HOST_WIDE_KIND,
    SPEC_GLOBS,
    Spec,
    covered_gpu_nodes,
    device_names,
    discover,
    format_problems,
    load_specs,
    references,
)
from checks.nvidia_version import DriverVersion, parse_proc_version

PROC_VERSION = "/proc/driver/nvidia/version"
REGENERATE = (
    "Regenerate the spec for the loaded driver: `nvidia-ctk cdi generate "
    "--output=/var/run/cdi/nvidia.yaml` (or enable nvidia-cdi-refresh.path, toolkit 1.18+, "
    "which regenerates it when the driver changes), and remove stale copies in /etc/cdi."
)


def _driver(host: Any) -> Optional[str]:
    text = host.read_text_or_none(PROC_VERSION)
    parsed = parse_proc_version(text) if text else None
    return parsed.version if isinstance(parsed, DriverVersion) else None


def _expected_gpus(host: Any, policy: Any) -> Tuple[Optional[int], str, List[str]]:
    """(count, source, /dev/nvidiaN nodes when known)."""
    nodes = host.fact("dev_nodes")
    paths = (
        [str(n.get("path")) for n in nodes if isinstance(n, dict)]
        if isinstance(nodes, list)
        else []
    )
    numbered: List[str] = sorted({p for p in paths if re.fullmatch(r"/dev/nvidia\d+", p)})
    if isinstance(policy.settings.get("expected_gpus"), int):
        return policy.settings["expected_gpus"], "config expected_gpus", numbered
    snap = host.gpus()
    if isinstance(snap, dict) and isinstance(snap.get("gpus"), list) and snap["gpus"]:
        return len(snap["gpus"]), "NVML snapshot", numbered
    if numbered:
        return len(numbered), "/dev/nvidiaN nodes", numbered
    return None, "", numbered


def _spec_problems(host: Any, spec: Spec, driver: Optional[str]) -> Dict[str, List[str]]:
    assert spec.data is not None
    refs = references(spec.data)
    out: Dict[str, List[str]] = {"format": [] if spec.is_claim else format_problems(spec.data)}
    out["missing"] = [p for p in refs.device_nodes + refs.mounts if not host.exists(p)]
    out["missing"] += [p for p in refs.hooks if not host.is_executable(p)]
    out["stale"] = sorted(
        f"{where} is {v}" for where, v in refs.driver_versions.items() if driver and v != driver
    )
    return out


def _run(host: Any, policy: Any) -> Outcome:
    if not host.exists(PROC_VERSION):
        # "Current" is relative to the loaded driver; driver-loaded owns its absence.
        return skipped(f"needs the NVIDIA driver loaded ({PROC_VERSION} absent; see driver-loaded)",
                       kind="needs:driver-loaded")
    specs = load_specs(host)
    driver = _driver(host)
    nvidia = [s for s in specs if s.is_nvidia]
    broken = [s for s in specs if s.error]
    details: Dict[str, Any] = {
        "specs": [s.path for s in nvidia],
        "claim_specs": [s.path for s in nvidia if s.is_claim],
        "driver_version": driver,
    }
    fails: List[str] = []
    warns: List[str] = []
    remediation = REGENERATE
    for spec in broken:
        (fails if spec.is_nvidia else warns).append(spec.error or spec.path)
    per_spec: Dict[str, Any] = {}
    for spec in (s for s in nvidia if s.data is not None):
        problems = _spec_problems(host, spec, driver)
        per_spec[spec.path] = {k: v for k, v in problems.items() if v}
        if problems["format"]:
            fails.append(f"{spec.path}: {'; '.join(problems['format'])}")
        if problems["stale"]:
            fails.append(
                f"{spec.path} was generated for another driver (loaded {driver}; "
                f"{problems['stale'][0]})"
            )
        elif problems["missing"]:
            more = (
                f" (+{len(problems['missing']) - 1} more)" if len(problems["missing"]) > 1 else ""
            )
            fails.append(
                f"{spec.path} references {problems['missing'][0]}, which does not exist{more}"
            )
    details["problems"] = per_spec
    host_wide = [
        s for s in nvidia if s.data is not None and not s.is_claim and s.kind == HOST_WIDE_KIND
    ]
    # Duplicate fully-qualified names: within one directory the CDI cache rejects both; across
    # directories the later one (cdi_spec_dirs order) shadows the other.
    seen: Dict[str, str] = {}
    for spec in (s for s in nvidia if s.data is not None and not s.is_claim):
        for name in device_names(spec.data or {}):
            fq = f"{spec.kind}={name}"
            other = seen.setdefault(fq, spec.path)
            if other != spec.path:
                same_dir = posixpath.dirname(other) == posixpath.dirname(spec.path)
                (fails if same_dir else warns).append(
                    f"device {fq} defined in {other} and {spec.path}"
                )
    expected, source, numbered = _expected_gpus(host, policy)
    details.update(expected_gpus=expected, expected_source=source or None)
    if host_wide:
        covered = sorted({n for s in host_wide for n in covered_gpu_nodes(s.data or {})})
        details["covered_gpu_nodes"] = covered
        if expected is not None and len(covered) < expected:
            missing = [n for n in numbered if n not in covered]
            which = f" (missing {', '.join(missing)})" if missing else ""
            fails.append(
                f"{HOST_WIDE_KIND} spec covers {len(covered)} of {expected} GPUs{which} ({source})"
            )
        elif expected is None:
            details["coverage"] = "not verified: GPU count unknown on this host"
    elif not nvidia:
        cdi = policy.settings.get("cdi") or {}
        if cdi.get("require_spec"):
            return failed(
                f"no NVIDIA CDI spec in {', '.join(CDI_DIRS)} "
                "and the config requires one (cdi.require_spec)",
                REGENERATE,
                **details,
            )
        if warns:
            return warned(warns[0], remediation, warnings=warns, **details)
        return passed("no NVIDIA CDI spec on this host (none required)", **details)
    if fails:
        more = f" (+{len(fails) - 1} more)" if len(fails) > 1 else ""
        return failed(fails[0] + more, remediation, failures=fails, warnings=warns, **details)
    if warns:
        return warned(warns[0], remediation, warnings=warns, **details)
    count = f", {len(details.get('covered_gpu_nodes', []))} GPU(s) covered" if host_wide else ""
    return passed(
        f"{len(nvidia)} NVIDIA CDI spec(s) current for driver {driver or 'unknown'}{count}",
        **details,
    )


CDI_SPEC_CURRENT = Check(
    id="cdi-spec-current",
    title="NVIDIA CDI specs are current for the loaded driver",
    severity=Severity.CRITICAL,
    gates=ALL_PATHS,
    interval=Interval.SLOW,
    remediation=REGENERATE,
    run=_run,
    reads=SPEC_GLOBS + (PROC_VERSION,),
    facts=("dev_nodes",),
    uses_gpus=True,
    discover=discover,
    timeout_s=15.0,
)
