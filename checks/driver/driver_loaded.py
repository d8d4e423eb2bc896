"""driver-loaded: the NVIDIA kernel module is loaded and its device nodes exist."""
import re
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
    passed,
    unknown,
)
from checks.driver.common import PROC_VERSION, nvidia_gpus_on_pci
from checks.operator.state import (
    DRIVER_PRESENCE,
    DRIVER_READS,
    PROC_UPTIME,
    VALIDATOR_SOURCE,
    driver_discover,
    driver_owned,
    driver_waiting,
    waiting_outcome,
)
from checks.policy import ResolvedPolicy

# /dev/nvidiactl is char 195:255 and /dev/nvidiaN is 195:N (NVIDIA driver README,
# "Installing the NVIDIA driver: device files").
NVIDIA_MAJOR = 195
README_DEVICE_FILES = 'NVIDIA driver README, "Installing the NVIDIA driver: device files"'


OPERATOR_DRIVER_LATE = "operator-driver-late"


def _driver_loaded(host: HostView, policy: ResolvedPolicy) -> Outcome:
    if driver_owned(policy):
        # The operator's driver container loads the module and mounts its root only after
        # the node joined and the operator scheduled it: until then this is no fault of the
        # host (skip), past policy.operator.grace_period_s it is (fail).
        waiting = driver_waiting(host, policy)
        if waiting is not None:
            return waiting_outcome(waiting, policy, OPERATOR_DRIVER_LATE)
    text = host.read_text_or_none(PROC_VERSION)
    if text is None:
        return failed(f"NVIDIA kernel module not loaded ({PROC_VERSION} absent)",
                      code="module-not-loaded")
    nodes = host.fact("dev_nodes")
    gpus = nvidia_gpus_on_pci(host.fact("pci_devices"))
    details: Dict[str, Any] = {"gpus_on_pci": None if gpus is None else len(gpus)}
    if nodes is None:
        return unknown(
            "kernel module loaded; /dev/nvidia* device nodes not captured for this host",
            code="dev-nodes-unknown",
            **details,
        )
    if not isinstance(nodes, list):
        return unknown("device node facts are malformed (expected a list)",
                       code="dev-nodes-unknown", **details)
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
        return failed("kernel module loaded but " + "; ".join(problems),
                      code="dev-nodes-missing", **details)
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
    reads=(PROC_VERSION, PROC_UPTIME) + DRIVER_READS,
    presence=DRIVER_PRESENCE,
    discover=driver_discover,
    facts=("dev_nodes", "pci_devices", "node"),  # node: the operator's upgrade state
    timeout_s=5.0,
    failures=(
        Failure(
            "module-not-loaded", Status.FAIL,
            f"the NVIDIA kernel module is not loaded ({PROC_VERSION} absent)",
            "Install the NVIDIA data center driver for this kernel and load it "
            "(`modprobe nvidia`), then re-run the check.",
            README_DEVICE_FILES,
        ),
        Failure(
            "dev-nodes-unknown", Status.UNKNOWN,
            "the module is loaded but the /dev/nvidia* device nodes are not known (the "
            "dev_nodes fact is not captured or is malformed)",
            "Run the check on the host itself, or capture a new bundle there "
            "(`gpu-node-agent collect`), so the device nodes are recorded.",
            README_DEVICE_FILES,
        ),
        Failure(
            "dev-nodes-missing", Status.FAIL,
            "the module is loaded but /dev/nvidiactl or a /dev/nvidiaN node is missing or not "
            f"char major {NVIDIA_MAJOR}",
            "Create the device nodes with `nvidia-modprobe -c 0 -u` or by enabling "
            "nvidia-persistenced, then re-run the check.",
            README_DEVICE_FILES,
        ),
        Failure(
            OPERATOR_DRIVER_LATE, Status.FAIL,
            "the GPU Operator installs the driver on this path and its driver is still not on "
            "the host (module not loaded or no libnvidia-ml under the driver root) past "
            "policy.operator.grace_period_s since boot",
            "See why the operator's driver pod on this node is not ready (`kubectl -n "
            "gpu-operator get pods -o wide --field-selector spec.nodeName=<node>`, then the "
            "nvidia-driver-daemonset pod's logs); its startup probe writes "
            "/run/nvidia/validations/.driver-ctr-ready once nvidia-smi works. If this node "
            "should use a host-installed driver, set policy.driver.managed_by_operator: false.",
            VALIDATOR_SOURCE,
        ),
    ),
)
