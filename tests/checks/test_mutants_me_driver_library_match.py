"""driver-library-match on the GPU Operator's driver (policy v2, driver.managed_by_operator and
operator.judge_managed): while the driver container has not put its module and libraries on
the host it is driver-loaded's wait (skip, input missing, with the wait's summary, never a
failure here even past the grace period); a mismatch names every library directory and gives
the operator's own fix; a driver root is joined to the library directories whatever its
trailing slashes. Module text as NVIDIA's kernel module prints /proc/driver/nvidia/version;
the operator's default root /run/nvidia/driver and validations dir /run/nvidia/validations
(NVIDIA/gpu-operator). Expected values by hand from checks/driver/driver_library_match.py and
checks/operator/state.py (waiting_summary: "waiting for the GPU Operator <component>:
<missing>; <markers> (<when>)")."""
import datetime
from typing import Any, Dict, Optional

from agent.config import Config
from agent.host.seam import Host
from agent.model import SKIP_INPUT_MISSING, Status
from checks.driver.driver_library_match import DRIVER_LIBRARY_MATCH
from checks.policy import ResolvedPolicy, load_policy
from tests.checks.test_mutants_md_os_supported import host_with

MODULE = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.15  Wed Jan  8 20:08:14 UTC "
          "2025\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n")
OPERATOR_FIX = ("The loaded module is not the one the GPU Operator's driver container ships (a "
                "module from a host install or an earlier driver container is still loaded): "
                "drain the node and reboot, so the driver container loads its own module.")


def _policy(operator: Optional[Dict[str, Any]] = None) -> ResolvedPolicy:
    overrides: Dict[str, Any] = {"driver": {"managed_by_operator": True}}
    if operator:
        overrides["operator"] = operator
    return ResolvedPolicy(load_policy(2, overrides), "operator-clusterpolicy",
                          today=datetime.date(2026, 12, 1), settings=Config().model_dump())


def _host(tmp_path, files: Dict[str, str]) -> Host:
    return host_with(tmp_path, files)


def test_the_operators_driver_not_there_yet_is_the_wait_not_a_library_verdict(tmp_path):
    # The module is loaded but the driver root holds no libnvidia-ml: the wait, skipped.
    h = _host(tmp_path, {"/proc/driver/nvidia/version": MODULE, "/proc/uptime": "120.5 60.0\n"})
    out = DRIVER_LIBRARY_MATCH.run(h, _policy({"grace_period_s": 900}))
    assert (out.status, out.skip, out.code) == (Status.SKIP, SKIP_INPUT_MISSING, None)
    assert out.summary == ("waiting for the GPU Operator driver: no libnvidia-ml under "
                           "/run/nvidia/driver; no validator markers in /run/nvidia/validations "
                           "(up 120s of a 900s grace period)")
    assert out.details["waiting_for"] == "gpu-operator-driver"
    assert out.details["uptime_s"] == 120 and out.details["grace_period_s"] == 900


def test_past_the_grace_period_the_wait_stays_driver_loadeds_to_fail(tmp_path):
    h = _host(tmp_path, {"/proc/uptime": "5000.0 60.0\n"})
    out = DRIVER_LIBRARY_MATCH.run(h, _policy({"grace_period_s": 900}))
    assert (out.status, out.skip) == (Status.SKIP, SKIP_INPUT_MISSING)
    assert out.summary == ("waiting for the GPU Operator driver: kernel module not loaded "
                           "(/proc/driver/nvidia/version absent); no libnvidia-ml under "
                           "/run/nvidia/driver; no validator markers in /run/nvidia/validations "
                           "(up 5000s of a 900s grace period)")


def test_a_mismatch_in_two_directories_names_both_and_gives_the_operators_fix(tmp_path):
    root = "/run/nvidia/driver"
    h = _host(tmp_path, {"/proc/driver/nvidia/version": MODULE,
                         f"{root}/usr/lib64/libnvidia-ml.so.580.95.05": "",
                         f"{root}/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.575.51.03": ""})
    out = DRIVER_LIBRARY_MATCH.run(h, _policy())
    assert (out.status, out.code) == (Status.FAIL, "library-mismatch")
    assert out.summary == (
        "Driver/library version mismatch: kernel module 570.86.15, the GPU Operator driver's "
        f"libnvidia-ml 575.51.03 in {root}/usr/lib/x86_64-linux-gnu, 580.95.05 in "
        f"{root}/usr/lib64")
    assert out.remediation == OPERATOR_FIX


def test_an_unversioned_library_is_input_missing_with_the_details(tmp_path):
    root = "/run/nvidia/driver"
    h = _host(tmp_path, {"/proc/driver/nvidia/version": MODULE,
                         f"{root}/usr/lib64/libnvidia-ml.so": ""})
    out = DRIVER_LIBRARY_MATCH.run(h, _policy())
    assert (out.status, out.skip) == (Status.SKIP, SKIP_INPUT_MISSING)
    assert out.summary == f"no versioned libnvidia-ml under {root}; nothing to compare"
    assert dict(out.details) == {"kernel_module": "570.86.15", "libnvidia_ml": {},
                                 "driver_root": root}


def test_a_driver_root_with_a_trailing_slash_names_the_directories_once(tmp_path):
    h = _host(tmp_path, {"/proc/driver/nvidia/version": MODULE,
                         "/run/nvidia/driver/usr/lib64/libnvidia-ml.so.570.86.15": ""})
    out = DRIVER_LIBRARY_MATCH.run(h, _policy({"driver_root": "/run/nvidia/driver/"}))
    assert out.status == Status.PASS
    assert dict(out.details["libnvidia_ml"]) == {"/run/nvidia/driver/usr/lib64": "570.86.15"}


def test_a_driver_root_ending_in_a_capital_x_keeps_its_name(tmp_path):
    root = "/srv/DRIVERS/LINUX"
    h = _host(tmp_path, {"/proc/driver/nvidia/version": MODULE,
                         f"{root}/usr/lib64/libnvidia-ml.so.570.86.15": ""})
    out = DRIVER_LIBRARY_MATCH.run(h, _policy({"driver_root": root}))
    assert out.status == Status.PASS
    assert dict(out.details["libnvidia_ml"]) == {f"{root}/usr/lib64": "570.86.15"}
