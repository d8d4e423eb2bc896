"""The driver family: driver-loaded, driver-branch, driver-library-match."""
import re
from typing import Any, Dict, List, Optional, Tuple

from checks.base import (
    ALL_PATHS,
    Check,
    Interval,
    Outcome,
    Severity,
    failed,
    input_missing,
    needs,
    not_applicable,
    passed,
    unknown,
    warned,
)
from checks.nvidia_version import DriverVersion, Unparsable, parse_proc_version

PROC_VERSION = "/proc/driver/nvidia/version"
# PCI base class 03 (display): 0300 VGA-compatible, 0302 3D controller (data center GPUs).
GPU_PCI_CLASSES = ("0300", "0302")
# /dev/nvidiactl is char 195:255 and /dev/nvidiaN is 195:N (NVIDIA driver README,
# "Installing the NVIDIA driver: device files").
NVIDIA_MAJOR = 195
LIB_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
)
_LIB_VERSION = re.compile(r"libnvidia-ml\.so\.(\d+\.\d+(?:\.\d+)?)$")
_SMI_MISMATCH = re.compile(r"NVML library version:\s*(\d+\.\d+(?:\.\d+)?)")
SMI_ARGV = ("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader")


def read_driver_version(host: Any) -> Tuple[Optional[DriverVersion], str]:
    """The loaded kernel module's version, or None with the reason."""
    text = host.read_text_or_none(PROC_VERSION)
    if text is None:
        return None, f"{PROC_VERSION} absent: the NVIDIA kernel module is not loaded"
    parsed = parse_proc_version(text)
    if isinstance(parsed, Unparsable):
        return None, parsed.reason
    return parsed, ""


def _version_or_outcome(host: Any, what: str) -> Tuple[Optional[DriverVersion], Optional[Outcome]]:
    """The module version, or the outcome when there is none. Only the version file is
    needed: missing /dev nodes (nvidia-persistenced or nvidia-modprobe not run yet) are
    driver-loaded's finding and must not hide a too-old branch (kubeadm preflight reports
    every problem in one run). No version file at all is driver-loaded's failure to own."""
    if not host.exists(PROC_VERSION):
        return None, needs(
            "driver-loaded", f"needs driver-loaded ({PROC_VERSION} absent: module not loaded)"
        )
    version, why = read_driver_version(host)
    if version is None:
        return None, unknown(f"cannot read the {what}: {why}")
    return version, None


def nvidia_gpus_on_pci(pci: Optional[List[Dict[str, Any]]]) -> Optional[List[Dict[str, Any]]]:
    if not isinstance(pci, list):
        return None  # absent or malformed: unknown, never guessed
    return [
        d
        for d in pci
        if isinstance(d, dict) and str(d.get("class", "")).rjust(6, "0")[:4] in GPU_PCI_CLASSES
    ]


# -- driver-loaded ---------------------------------------------------------------------
def _driver_loaded(host: Any, policy: Any) -> Outcome:
    text = host.read_text_or_none(PROC_VERSION)
    if text is None:
        return failed(f"NVIDIA kernel module not loaded ({PROC_VERSION} absent)")
    nodes = host.fact("dev_nodes")
    gpus = nvidia_gpus_on_pci(host.fact("pci_devices"))
    details: Dict[str, Any] = {"gpus_on_pci": None if gpus is None else len(gpus)}
    if nodes is None:
        return unknown(
            "kernel module loaded; /dev/nvidia* device nodes not captured for this host",
            **details,
        )
    if not isinstance(nodes, list):
        return unknown("device node facts are malformed (expected a list)", **details)
    names: Dict[str, Dict[str, Any]] = {
        n["path"]: n for n in nodes if isinstance(n, dict) and isinstance(n.get("path"), str)
    }
    numbered = sorted(p for p in names if re.fullmatch(r"/dev/nvidia\d+", p))
    details.update(device_nodes=sorted(names))
    problems = []
    if "/dev/nvidiactl" not in names:
        problems.append("/dev/nvidiactl missing")
    wrong_major = [p for p, n in names.items() if n.get("major") != NVIDIA_MAJOR and p in numbered]
    if wrong_major:
        problems.append(f"{', '.join(wrong_major)} not char major {NVIDIA_MAJOR}")
    wanted = len(gpus) if gpus is not None else 1
    if len(numbered) < wanted:
        problems.append(f"{len(numbered)} /dev/nvidiaN node(s) for {wanted} GPU(s) on PCI")
    if problems:
        return failed("kernel module loaded but " + "; ".join(problems), **details)
    return passed(
        f"kernel module loaded, /dev/nvidiactl and {len(numbered)} /dev/nvidiaN node(s) present",
        **details,
    )


DRIVER_LOADED = Check(
    id="driver-loaded",
    title="NVIDIA kernel module loaded and device nodes present",
    severity=Severity.CRITICAL,
    gates=ALL_PATHS,
    interval=Interval.SLOW,
    remediation=(
        "Install the NVIDIA data center driver for this kernel and load it (`modprobe nvidia`); "
        "create missing device nodes with `nvidia-modprobe -c 0 -u` or by enabling "
        "nvidia-persistenced, then re-run the check."
    ),
    run=_driver_loaded,
    reads=(PROC_VERSION,),
    facts=("dev_nodes", "pci_devices"),
    timeout_s=5.0,
)


# -- driver-branch ---------------------------------------------------------------------
def _operator_owned(policy: Any, managed: bool) -> bool:
    return managed and policy.path.startswith("operator-")


def _driver_branch(host: Any, policy: Any) -> Outcome:
    dp = policy.policy.driver
    if _operator_owned(policy, dp.managed_by_operator):
        return not_applicable(f"the GPU Operator installs the driver on the {policy.path} path")
    version, early = _version_or_outcome(host, "driver version")
    if version is None:
        assert early is not None
        return early
    info = dp.branches.get(version.branch)
    kind = {"ltsb": "long-term support", "production": "production", "feature": "new feature"}
    kind_text = (
        f"{kind[info.kind]} branch" if info else "branch not in the policy's lifecycle table"
    )
    eol = info is not None and info.is_past_end_of_life(policy.today)
    details = {
        "version": version.version,
        "branch": version.branch,
        "flavor": version.flavor,
        "branch_kind": info.kind if info else None,
        "end_of_life": str(info.end_of_life) if info and info.end_of_life else None,
        "past_end_of_life": eol,
        "path": policy.path,
    }
    desc = f"{version.version} ({version.flavor} module), R{version.branch} {kind_text}"
    minimum = dp.minimum_branch.get(policy.path)
    if minimum is not None and version.branch < minimum:
        return failed(
            f"{desc}: below the {policy.path} minimum R{minimum}",
            f"Install driver branch R{minimum} or newer (an LTSB such as R580 for production), "
            "reboot, then re-run the check.",
            minimum_branch=minimum,
            **details,
        )
    if dp.allowed_branches and version.branch not in dp.allowed_branches:
        allowed = ", ".join(f"R{b}" for b in dp.allowed_branches)
        return failed(
            f"{desc}: not an allowed branch ({allowed})",
            f"Install one of the fleet's allowed branches ({allowed}) or change policy.driver."
            "allowed_branches.",
            **details,
        )
    if eol and policy.path in dp.warn_past_end_of_life_paths:
        return warned(
            f"{desc}: past NVIDIA's end of life"
            + (f" ({info.end_of_life})" if info and info.end_of_life else ""),
            "Plan an upgrade to a supported branch (R580 LTSB); an ended branch gets no "
            "security fixes.",
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
    reads=(PROC_VERSION,),
    timeout_s=5.0,
)


# -- driver-library-match --------------------------------------------------------------
def userspace_nvml_versions(host: Any) -> Dict[str, str]:
    """libnvidia-ml version per library directory, from the soname link the loader uses
    (libnvidia-ml.so.1 -> libnvidia-ml.so.<version>), else from the versioned file."""
    found: Dict[str, str] = {}
    for lib_dir in LIB_DIRS:
        target = host.readlink(f"{lib_dir}/libnvidia-ml.so.1")
        m = _LIB_VERSION.search(target) if target else None
        if m:
            found[lib_dir] = m.group(1)
            continue
        versioned = [
            mm.group(1)
            for path in host.glob(f"{lib_dir}/libnvidia-ml.so.*")
            if (mm := _LIB_VERSION.search(path))
        ]
        if versioned:
            found[lib_dir] = sorted(versioned)[-1]
    return found


def _driver_library_match(host: Any, policy: Any) -> Outcome:
    version, early = _version_or_outcome(host, "kernel module version")
    if version is None:
        assert early is not None
        return early
    libs = userspace_nvml_versions(host)
    smi = host.run(list(SMI_ARGV), timeout=10)
    smi_text = smi.stdout + smi.stderr
    smi_lib = _SMI_MISMATCH.search(smi_text)
    details: Dict[str, Any] = {"kernel_module": version.version, "libnvidia_ml": libs}
    mismatched = {d: v for d, v in libs.items() if v != version.version}
    if smi_lib and smi_lib.group(1) != version.version:
        mismatched.setdefault("nvidia-smi", smi_lib.group(1))
    if mismatched:
        where = ", ".join(f"{v} in {d}" for d, v in sorted(mismatched.items()))
        return failed(
            f"Driver/library version mismatch: kernel module {version.version}, "
            f"userspace libnvidia-ml {where}",
            "The driver packages were upgraded without reloading the module: drain the node "
            "and reboot (or unload and reload the nvidia modules) so the kernel module matches "
            "the userspace libraries; pin the driver packages if the upgrade was unintended.",
            **details,
        )
    if not libs and not smi_lib:
        # nvml-responsive owns "library not found"; this check's own input is absent.
        return input_missing(
            "libnvidia-ml not found (in " + ", ".join(LIB_DIRS) + "); nothing to compare",
            **details,
        )
    return passed(f"kernel module and libnvidia-ml are both {version.version}", **details)


DRIVER_LIBRARY_MATCH = Check(
    id="driver-library-match",
    title="Kernel module version matches the userspace libnvidia-ml",
    severity=Severity.CRITICAL,
    gates=ALL_PATHS,
    interval=Interval.SLOW,
    remediation="Reboot (or reload the nvidia modules) so the kernel module matches userspace.",
    run=_driver_library_match,
    reads=(PROC_VERSION,),
    presence=tuple(f"{d}/libnvidia-ml.so*" for d in LIB_DIRS),
    runs=(SMI_ARGV,),
    timeout_s=15.0,
)
