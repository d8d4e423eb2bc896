"""driver-library-match when the GPU Operator owns the driver (policy v2: judge_managed): the
loaded module (/proc/driver/nvidia/version, "NVRM version: NVIDIA UNIX <arch> Kernel Module
<version> ...", as NVIDIA's kernel module prints it) against the libnvidia-ml.so.<version> the
driver container ships under its driver root (/run/nvidia/driver, the operator's default,
NVIDIA/gpu-operator's driver-ready file: NVIDIA_DRIVER_ROOT=/run/nvidia/driver). The whole
Outcome is compared; the mutation tier found this branch judged only by its verdict."""
import datetime

from agent.config import Config
from agent.host.seam import Host
from agent.model import Status
from checks.driver.common import VERSION_UNREADABLE
from checks.driver.driver_library_match import DRIVER_LIBRARY_MATCH
from checks.policy import ResolvedPolicy, load_policy

ROOT = "/run/nvidia/driver"
LIBDIR = ROOT + "/usr/lib/x86_64-linux-gnu"
MODULE = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.15  Wed Jan  8 20:08:14 UTC "
          "2025\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n")


def _policy() -> ResolvedPolicy:
    return ResolvedPolicy(load_policy(2, {"driver": {"managed_by_operator": True}}),
                          "operator-clusterpolicy", today=datetime.date(2026, 12, 1),
                          settings=Config().model_dump())


def _host(tmp_path, module_text: str, lib_version: str) -> Host:
    for path, text in (("/proc/driver/nvidia/version", module_text),
                       (f"{LIBDIR}/libnvidia-ml.so.{lib_version}", "")):
        target = tmp_path / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return Host(tmp_path)


def test_the_operators_library_matching_the_module_passes_with_its_details(tmp_path):
    out = DRIVER_LIBRARY_MATCH.run(_host(tmp_path, MODULE, "570.86.15"), _policy())
    assert out.status == Status.PASS
    assert dict(out.details) == {"kernel_module": "570.86.15",
                                 "libnvidia_ml": {LIBDIR: "570.86.15"}, "driver_root": ROOT}
    assert out.summary == ("kernel module and the GPU Operator driver's libnvidia-ml (under "
                           "/run/nvidia/driver) are both 570.86.15")


def test_the_operators_library_of_another_version_is_a_mismatch(tmp_path):
    out = DRIVER_LIBRARY_MATCH.run(_host(tmp_path, MODULE, "580.95.05"), _policy())
    assert (out.status, out.code) == (Status.FAIL, "library-mismatch")
    assert dict(out.details) == {"kernel_module": "570.86.15",
                                 "libnvidia_ml": {LIBDIR: "580.95.05"}, "driver_root": ROOT}
    assert out.summary == ("Driver/library version mismatch: kernel module 570.86.15, the GPU "
                           f"Operator driver's libnvidia-ml 580.95.05 in {LIBDIR}")


def test_an_unreadable_module_version_is_unknown_naming_the_kernel_module_version(tmp_path):
    out = DRIVER_LIBRARY_MATCH.run(_host(tmp_path, "not the NVRM line\n", "570.86.15"),
                                   _policy())
    assert (out.status, out.code) == (Status.UNKNOWN, VERSION_UNREADABLE)
    assert out.summary.startswith("cannot read the kernel module version: ")
