"""gpu-operator: on the GPU Operator's paths, the operator validator's readiness markers, and
no ownership conflict: a host-installed driver or toolkit while the operator is set to
install one (policy.driver/toolkit.managed_by_operator), or the operator's copy while the
config says the host owns it. A conflict fails when policy.operator.ownership_conflicts is
true (policy version 2); the check itself arrived in version 2 (since_policy=2).
"""
from typing import Any, Dict, List, Tuple

from agent.driver_layout import LIB_DIRS
from checks.base import (
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
)
from checks.operator.ownership import DPKG_STATUS, HOST_RUNTIME, RPM_ARGV, Evidence, evidence
from checks.operator.policy import OPERATOR_VALIDATIONS_DIR
from checks.operator.state import (
    DRIVER_PRESENCE,
    DRIVER_READS,
    PROC_VERSION,
    TOOLKIT_PRESENCE,
    VALIDATOR_SOURCE,
    driver_discover,
    driver_ready_fields,
    marker_text,
    markers,
)
from checks.operator.state import DRIVER_READY as DRIVER_READY_FILE
from checks.policy import ResolvedPolicy

OPERATOR_PATHS: Tuple[str, ...] = ("operator-clusterpolicy", "operator-gpucluster")
HOST_DRIVER = "host-driver-beside-operator"
OPERATOR_DRIVER = "operator-driver-unmanaged"
HOST_TOOLKIT = "host-toolkit-beside-operator"
OPERATOR_TOOLKIT = "operator-toolkit-unmanaged"
OPERATOR_DOCS = (
    'NVIDIA GPU Operator documentation, "Installing the NVIDIA GPU Operator" (pre-installed '
    "drivers: driver.enabled=false; pre-installed NVIDIA Container Toolkit: "
    "toolkit.enabled=false); NVIDIA/gpu-operator controllers/state_manager.go (gpuStateLabels: "
    "nvidia.com/gpu.deploy.driver, nvidia.com/gpu.deploy.container-toolkit; a value already on "
    "the node is kept, so `false` keeps that operand off the node)"
)


def _conflicts(ev: Evidence, policy: ResolvedPolicy) -> List[Tuple[str, str]]:
    on_operator_path = policy.path in OPERATOR_PATHS
    driver_by_operator = on_operator_path and policy.policy.driver.managed_by_operator
    toolkit_by_operator = on_operator_path and policy.policy.toolkit.managed_by_operator
    out: List[Tuple[str, str]] = []
    if driver_by_operator and ev.host_driver:
        out.append((HOST_DRIVER, "a host-installed driver while the GPU Operator installs the "
                    f"driver ({'; '.join(ev.host_driver)})"))
    if not driver_by_operator and ev.operator_driver:
        out.append((OPERATOR_DRIVER, "the GPU Operator's driver while the config says the "
                    "host owns the driver (policy.driver.managed_by_operator false on "
                    f"{policy.path}: {'; '.join(ev.operator_driver)})"))
    if toolkit_by_operator and ev.host_toolkit:
        out.append((HOST_TOOLKIT, "a host-installed NVIDIA Container Toolkit while the GPU "
                    f"Operator installs the toolkit ({'; '.join(ev.host_toolkit)})"))
    if not toolkit_by_operator and ev.operator_toolkit:
        out.append((OPERATOR_TOOLKIT, "the GPU Operator's toolkit while the config says the "
                    "host owns the toolkit (policy.toolkit.managed_by_operator false on "
                    f"{policy.path}: {'; '.join(ev.operator_toolkit)})"))
    return out


def _gpu_operator(host: HostView, policy: ResolvedPolicy) -> Outcome:
    found = markers(host, policy)
    ev = evidence(host, policy)
    operator_seen = bool(found or ev.operator_driver or ev.operator_toolkit)
    if policy.path not in OPERATOR_PATHS and not operator_seen:
        return not_applicable(f"no GPU Operator on the {policy.path} path and no trace of it "
                              "on the host")
    conflicts = _conflicts(ev, policy)
    details: Dict[str, Any] = {
        "markers": found,
        "driver_ready": driver_ready_fields(host, policy),
        "evidence": {"host_driver": ev.host_driver, "operator_driver": ev.operator_driver,
                     "host_toolkit": ev.host_toolkit, "operator_toolkit": ev.operator_toolkit},
        "conflicts": [code for code, _ in conflicts],
        "package_db": ev.package_db,
    }
    if conflicts and policy.policy.operator.ownership_conflicts:
        code, first = conflicts[0]
        more = "; also " + "; ".join(text for _, text in conflicts[1:]) if conflicts[1:] else ""
        return failed(f"ownership conflict: {first}{more}; {marker_text(found, policy)}",
                      code=code, **details)
    by = {True: "the GPU Operator", False: "the host"}
    owners = (f"driver by {by[policy.policy.driver.managed_by_operator]}, toolkit by "
              f"{by[policy.policy.toolkit.managed_by_operator]}")
    if policy.path not in OPERATOR_PATHS:
        owners = f"no GPU Operator expected on the {policy.path} path"
    verdict = ("no ownership conflict" if not conflicts else
               "ownership conflict not judged (policy.operator.ownership_conflicts false): "
               + "; ".join(text for _, text in conflicts))
    if not ev.package_db:
        verdict += " (no package database read: dpkg status absent, `rpm -qa` unavailable)"
    return passed(f"{owners}; {marker_text(found, policy)}; {verdict}", **details)


def _fix(what: str, label: str, enabled: str, managed: str, remove: str) -> str:
    return (f"Pick one owner for the {what}. Keep the host's: label the node "
            f"`{label}=false` (this node) or set the ClusterPolicy `{enabled}=false` (every "
            f"node), and set {managed}: false in the agent config. Or let the operator own it: "
            f"{remove}, reboot, and set {managed}: true.")


GPU_OPERATOR = Check(
    id="gpu-operator",
    title="GPU Operator readiness markers, and one owner for the driver and the toolkit",
    severity=Severity.CRITICAL,
    gates=OPERATOR_PATHS,
    interval=Interval.SLOW,
    remediation="Give the driver and the toolkit one owner: the host or the GPU Operator.",
    run=_gpu_operator,
    reads=(DPKG_STATUS, PROC_VERSION, f"{OPERATOR_VALIDATIONS_DIR}/{DRIVER_READY_FILE}")
    + DRIVER_READS,
    presence=DRIVER_PRESENCE + TOOLKIT_PRESENCE
    + tuple(f"{d}/libnvidia-ml.so*" for d in LIB_DIRS) + (HOST_RUNTIME,),
    discover=driver_discover,
    runs=(RPM_ARGV,),
    timeout_s=15.0,
    since_policy=2,
    failures=(
        Failure(
            HOST_DRIVER, Status.FAIL,
            "a host-installed NVIDIA driver (package, or module with libnvidia-ml in the host's "
            "library directories) while the GPU Operator is set to install the driver",
            _fix("driver", "nvidia.com/gpu.deploy.driver", "driver.enabled",
                 "policy.driver.managed_by_operator",
                 "remove the host driver (`apt-get purge 'nvidia-driver-*' 'libnvidia-*'` / "
                 "`dnf remove nvidia-driver 'kmod-nvidia*'`)"),
            OPERATOR_DOCS,
        ),
        Failure(
            OPERATOR_DRIVER, Status.FAIL,
            "the GPU Operator's driver (libraries under its driver root, .driver-ctr-ready) "
            "while the config says the host owns the driver",
            _fix("driver", "nvidia.com/gpu.deploy.driver", "driver.enabled",
                 "policy.driver.managed_by_operator", "keep no host driver installed"),
            OPERATOR_DOCS + "; " + VALIDATOR_SOURCE,
        ),
        Failure(
            HOST_TOOLKIT, Status.FAIL,
            "a host-installed NVIDIA Container Toolkit (package or /usr/bin/"
            "nvidia-container-runtime) while the GPU Operator is set to install the toolkit",
            _fix("toolkit", "nvidia.com/gpu.deploy.container-toolkit", "toolkit.enabled",
                 "policy.toolkit.managed_by_operator",
                 "remove the host toolkit (`apt-get purge nvidia-container-toolkit "
                 "nvidia-container-toolkit-base` / `dnf remove nvidia-container-toolkit`)"),
            OPERATOR_DOCS,
        ),
        Failure(
            OPERATOR_TOOLKIT, Status.FAIL,
            "the GPU Operator's toolkit (nvidia-container-runtime in its toolkit directory) "
            "while the config says the host owns the toolkit",
            _fix("toolkit", "nvidia.com/gpu.deploy.container-toolkit", "toolkit.enabled",
                 "policy.toolkit.managed_by_operator", "keep no host toolkit installed"),
            OPERATOR_DOCS + "; NVIDIA/nvidia-container-toolkit cmd/nvidia-ctk-installer/"
            "main.go (<toolkit-install-dir>/toolkit)",
        ),
    ),
)
