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
    Failure,
    HostView,
    Interval,
    Outcome,
    Severity,
    Status,
    failed,
    passed,
    skipped,
    warned,
)
from checks.containerd.cdi_specs import (
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
from checks.driver.nvidia_version import DriverVersion, parse_proc_version
from checks.policy import ResolvedPolicy

PROC_VERSION = "/proc/driver/nvidia/version"
REGENERATE = (
    "Regenerate the spec for the loaded driver: `nvidia-ctk cdi generate "
    "--output=/var/run/cdi/nvidia.yaml` (or enable nvidia-cdi-refresh.path, toolkit 1.18+, "
    "which regenerates it when the driver changes), and remove stale copies in /etc/cdi."
)
CDI_SPEC = "cncf-tags/container-device-interface SPEC.md"
CDI_CACHE = "cncf-tags/container-device-interface pkg/cdi/cache.go (spec directories, conflicts)"
GENERATE = "NVIDIA/nvidia-container-toolkit `nvidia-ctk cdi generate`"

SPEC_UNPARSEABLE = Failure(
    "spec-unparseable", Status.FAIL,
    "an NVIDIA CDI spec is not valid YAML/JSON or not a mapping (named with file and line)",
    REGENERATE, CDI_SPEC,
)
SPEC_FORMAT = Failure(
    "spec-invalid-format", Status.FAIL,
    "an NVIDIA CDI spec has an unsupported cdiVersion, an invalid kind or device name, no "
    "devices, or v0.5.0 features under an older cdiVersion",
    REGENERATE, CDI_SPEC + "; container-device-interface pkg/parser, specs-go version.go",
)
SPEC_STALE = Failure(
    "spec-stale", Status.FAIL,
    "an NVIDIA CDI spec names libraries or a hook --host-driver-version of another driver "
    "than the loaded one: generated before a driver upgrade",
    REGENERATE, GENERATE + "; /proc/driver/nvidia/version",
)
SPEC_PATH_MISSING = Failure(
    "spec-path-missing", Status.FAIL,
    "an NVIDIA CDI spec references a device node or mount that does not exist, or a hook "
    "that is not executable",
    REGENERATE, CDI_SPEC + " (containerEdits: deviceNodes, mounts, hooks)",
)
DEVICE_DUPLICATE = Failure(
    "device-duplicate", Status.FAIL,
    "one fully-qualified device (kind=name) is defined by two specs in the same directory: "
    "the CDI cache rejects both",
    REGENERATE, CDI_CACHE,
)
GPU_COVERAGE = Failure(
    "gpu-coverage-incomplete", Status.FAIL,
    f"the host-wide {HOST_WIDE_KIND} spec has fewer per-GPU /dev/nvidiaN devices than the host "
    "has GPUs",
    REGENERATE, GENERATE + " (one device per GPU)",
)
SPEC_REQUIRED = Failure(
    "spec-required-missing", Status.FAIL,
    "no NVIDIA CDI spec on the host and the config requires one (cdi.require_spec)",
    REGENERATE, CDI_SPEC + " (spec directories /etc/cdi, /var/run/cdi)",
)
DEVICE_SHADOWED = Failure(
    "device-shadowed", Status.WARN,
    "one fully-qualified device is defined in /etc/cdi and in /var/run/cdi: the later "
    "directory's definition shadows the other",
    REGENERATE, CDI_CACHE,
)
OTHER_SPEC_UNPARSEABLE = Failure(
    "other-vendor-spec-unparseable", Status.WARN,
    "another vendor's CDI spec does not parse (it cannot break GPUs, but the CDI cache "
    "reports it)",
    "Fix or remove the file named in the summary.", CDI_SPEC,
)


def _driver(host: HostView) -> Optional[str]:
    text = host.read_text_or_none(PROC_VERSION)
    parsed = parse_proc_version(text) if text else None
    return parsed.version if isinstance(parsed, DriverVersion) else None


def _expected_gpus(host: HostView, policy: ResolvedPolicy) -> Tuple[Optional[int], str, List[str]]:
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


def _spec_problems(host: HostView, spec: Spec, driver: Optional[str]) -> Dict[str, List[str]]:
    assert spec.data is not None
    refs = references(spec.data)
    out: Dict[str, List[str]] = {"format": [] if spec.is_claim else format_problems(spec.data)}
    out["missing"] = [p for p in refs.device_nodes + refs.mounts if not host.exists(p)]
    out["missing"] += [p for p in refs.hooks if not host.is_executable(p)]
    out["stale"] = sorted(
        f"{where} is {v}" for where, v in refs.driver_versions.items() if driver and v != driver
    )
    return out


def _run(host: HostView, policy: ResolvedPolicy) -> Outcome:
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
    # (failure code, message): the outcome is the first one's, the rest are listed.
    fails: List[Tuple[str, str]] = []
    warns: List[Tuple[str, str]] = []
    for spec in broken:
        if spec.is_nvidia:
            fails.append((SPEC_UNPARSEABLE.code, spec.error or spec.path))
        else:
            warns.append((OTHER_SPEC_UNPARSEABLE.code, spec.error or spec.path))
    per_spec: Dict[str, Any] = {}
    for spec in (s for s in nvidia if s.data is not None):
        problems = _spec_problems(host, spec, driver)
        per_spec[spec.path] = {k: v for k, v in problems.items() if v}
        if problems["format"]:
            fails.append((SPEC_FORMAT.code, f"{spec.path}: {'; '.join(problems['format'])}"))
        if problems["stale"]:
            fails.append((
                SPEC_STALE.code,
                f"{spec.path} was generated for another driver (loaded {driver}; "
                f"{problems['stale'][0]})",
            ))
        elif problems["missing"]:
            more = (
                f" (+{len(problems['missing']) - 1} more)" if len(problems["missing"]) > 1 else ""
            )
            fails.append((
                SPEC_PATH_MISSING.code,
                f"{spec.path} references {problems['missing'][0]}, which does not exist{more}",
            ))
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
                message = f"device {fq} defined in {other} and {spec.path}"
                if same_dir:
                    fails.append((DEVICE_DUPLICATE.code, message))
                else:
                    warns.append((DEVICE_SHADOWED.code, message))
    expected, source, numbered = _expected_gpus(host, policy)
    details.update(expected_gpus=expected, expected_source=source or None)
    if host_wide:
        covered = sorted({n for s in host_wide for n in covered_gpu_nodes(s.data or {})})
        details["covered_gpu_nodes"] = covered
        if expected is not None and len(covered) < expected:
            missing = [n for n in numbered if n not in covered]
            which = f" (missing {', '.join(missing)})" if missing else ""
            fails.append((
                GPU_COVERAGE.code,
                f"{HOST_WIDE_KIND} spec covers {len(covered)} of {expected} GPUs{which} ({source})",
            ))
        elif expected is None:
            details["coverage"] = "not verified: GPU count unknown on this host"
    elif not nvidia:
        cdi = policy.settings.get("cdi") or {}
        if cdi.get("require_spec"):
            return failed(
                f"no NVIDIA CDI spec in {', '.join(CDI_DIRS)} "
                "and the config requires one (cdi.require_spec)",
                code=SPEC_REQUIRED.code,
                **details,
            )
        if warns:
            return _warned(warns, details)
        return passed("no NVIDIA CDI spec on this host (none required)", **details)
    if fails:
        more = f" (+{len(fails) - 1} more)" if len(fails) > 1 else ""
        return failed(
            fails[0][1] + more,
            code=fails[0][0],
            failures=[m for _, m in fails],
            warnings=[m for _, m in warns],
            **details,
        )
    if warns:
        return _warned(warns, details)
    count = f", {len(details.get('covered_gpu_nodes', []))} GPU(s) covered" if host_wide else ""
    return passed(
        f"{len(nvidia)} NVIDIA CDI spec(s) current for driver {driver or 'unknown'}{count}",
        **details,
    )


def _warned(warns: List[Tuple[str, str]], details: Dict[str, Any]) -> Outcome:
    return warned(warns[0][1], code=warns[0][0], warnings=[m for _, m in warns], **details)


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
    failures=(
        SPEC_UNPARSEABLE,
        SPEC_FORMAT,
        SPEC_STALE,
        SPEC_PATH_MISSING,
        DEVICE_DUPLICATE,
        GPU_COVERAGE,
        SPEC_REQUIRED,
        DEVICE_SHADOWED,
        OTHER_SPEC_UNPARSEABLE,
    ),
)
