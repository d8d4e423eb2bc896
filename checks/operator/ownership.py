"""Who installed the driver and the container toolkit on this host: the host's own package
manager, the GPU Operator, or both (the ownership conflict the operator's documentation warns
about: its driver container must not run on a node with a pre-installed driver).

Host evidence: the dpkg status file (checks/dpkg.py) or `rpm -qa` naming a driver or toolkit
package; a loaded module with libnvidia-ml in the host's own library directories; the
toolkit's binary in /usr/bin (where the packages install it: NVIDIA Container Toolkit install
guide). Operator evidence: libnvidia-ml under the driver root, the driver container's
`.driver-ctr-ready` marker, the validator's driver-ready saying IS_HOST_DRIVER=false
(NVIDIA/gpu-operator cmd/nvidia-validator/main.go, Driver.createStatusFile), and
nvidia-container-runtime in the operator's toolkit directory.
"""
import re
from typing import List

from agent.records import field, record
from checks.base import HostView
from checks.dpkg import paragraphs, status_installed
from checks.operator.state import (
    DRIVER_CTR_READY,
    PROC_VERSION,
    RUNTIME,
    driver_ready_fields,
    nvml_libs_under,
)
from checks.policy import ResolvedPolicy

DPKG_STATUS = "/var/lib/dpkg/status"
RPM_ARGV = ("rpm", "-qa", "--qf", "%{NAME} %{VERSION}-%{RELEASE}\\n",
            "nvidia-driver*", "kmod-nvidia*", "cuda-drivers*", "nvidia-container-toolkit*")
HOST_RUNTIME = f"/usr/bin/{RUNTIME}"
# Driver packages: Ubuntu's nvidia-driver-<branch>[-server|-open] and libnvidia-compute-<branch>
# (Ubuntu "NVIDIA drivers installation"), NVIDIA's CUDA repository metapackages cuda-drivers
# and nvidia-open, RHEL's nvidia-driver[-cuda|-libs] and kmod-nvidia-* (NVIDIA Driver
# Installation Guide, "Red Hat Enterprise Linux").
DRIVER_PACKAGE = re.compile(
    r"^(nvidia-driver(-\d+\S*|-cuda|-libs)?|libnvidia-compute-\d+\S*|cuda-drivers(-\d+)?"
    r"|nvidia-open(-\d+)?|kmod-nvidia\S*)$"
)
# The toolkit's packages (NVIDIA Container Toolkit install guide: nvidia-container-toolkit,
# which depends on nvidia-container-toolkit-base).
TOOLKIT_PACKAGE = re.compile(r"^nvidia-container-toolkit(-base)?$")


@record
class Evidence:
    host_driver: List[str] = field(default_factory=list)
    operator_driver: List[str] = field(default_factory=list)
    host_toolkit: List[str] = field(default_factory=list)
    operator_toolkit: List[str] = field(default_factory=list)
    # Which package databases answered (dpkg's status file, `rpm -qa`): none = packages unseen.
    package_db: List[str] = field(default_factory=list)


def installed_packages(host: HostView, answered: List[str]) -> List[str]:
    """"name version" of every installed driver or toolkit package dpkg or rpm records; the
    databases that answered are appended to ``answered``."""
    found: List[str] = []
    status = host.read_text_or_none(DPKG_STATUS)
    if status is not None:
        answered.append("dpkg")
    for fields in paragraphs(status or ""):
        name = fields.get("Package", "")
        if (DRIVER_PACKAGE.match(name) or TOOLKIT_PACKAGE.match(name)) and status_installed(
                fields.get("Status", "")):
            found.append(f"{name} {fields.get('Version', '?')}")
    res = host.run(list(RPM_ARGV), timeout=10)
    if res.ok:
        answered.append("rpm")
        for line in res.stdout.splitlines()[:200]:
            words = line.split()
            if words and (DRIVER_PACKAGE.match(words[0]) or TOOLKIT_PACKAGE.match(words[0])):
                found.append(" ".join(words[:2]))
    return found


def evidence(host: HostView, policy: ResolvedPolicy) -> Evidence:
    op = policy.policy.operator
    ev = Evidence()
    packages = installed_packages(host, ev.package_db)
    ev.host_driver += [f"package {p}" for p in packages if DRIVER_PACKAGE.match(p.split()[0])]
    ev.host_toolkit += [f"package {p}" for p in packages if TOOLKIT_PACKAGE.match(p.split()[0])]
    host_libs = nvml_libs_under(host, "/")
    if host_libs and host.exists(PROC_VERSION):
        ev.host_driver.append(f"kernel module loaded with {host_libs[0]}")
    ready = driver_ready_fields(host, policy)
    is_host = ready.get("IS_HOST_DRIVER", "").lower()
    if is_host == "true":
        ev.host_driver.append("the operator validator's driver-ready says IS_HOST_DRIVER=true")
    root_libs = nvml_libs_under(host, op.driver_root)
    if root_libs:
        ev.operator_driver.append(f"{root_libs[0]}")
    if host.exists(f"{op.validations_dir}/{DRIVER_CTR_READY}"):
        ev.operator_driver.append(f"{op.validations_dir}/{DRIVER_CTR_READY}")
    if is_host == "false":
        ev.operator_driver.append(
            "the operator validator's driver-ready says IS_HOST_DRIVER=false")
    if host.exists(HOST_RUNTIME):
        ev.host_toolkit.append(HOST_RUNTIME)
    if host.exists(f"{op.toolkit_root}/{RUNTIME}"):
        ev.operator_toolkit.append(f"{op.toolkit_root}/{RUNTIME}")
    return ev
