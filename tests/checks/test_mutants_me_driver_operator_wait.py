"""driver-loaded and driver-branch while the GPU Operator owns the driver (policy v2,
driver.managed_by_operator, an operator-* path): until the driver container has put the
module (/proc/driver/nvidia/version) and libnvidia-ml under its root (/run/nvidia/driver,
NVIDIA/gpu-operator's default) on the host, both wait (skip, input missing); past
operator.grace_period_s driver-loaded, the owner of the wait, fails (operator-driver-late)
while driver-branch keeps waiting; once the driver is there both judge it as on any host.
Expected values by hand from checks/driver/driver_loaded.py, driver_branch.py and
checks/operator/state.py (waiting_summary, waiting_outcome)."""
from typing import Any, Dict, Optional

from agent.host.seam import Host, StaticFacts, StaticGpus
from agent.model import SKIP_INPUT_MISSING, Status
from checks.driver.driver_branch import DRIVER_BRANCH
from checks.driver.driver_loaded import DRIVER_LOADED, OPERATOR_DRIVER_LATE
from checks.policy import ResolvedPolicy, load_policy

MODULE = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.15  Wed Jan  8 20:08:14 UTC "
          "2025\n")
LIB = "/run/nvidia/driver/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.570.86.15"
MARKERS = "no validator markers in /run/nvidia/validations"


def _host(tmp_path, uptime: float, files: Optional[Dict[str, str]] = None) -> Host:
    all_files = {"/proc/uptime": f"{uptime} 10.0\n", **(files or {})}
    for path, text in all_files.items():
        target = tmp_path / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return Host(tmp_path, gpus=StaticGpus(None), facts=StaticFacts({}))


def _policy(**operator: Any) -> ResolvedPolicy:
    op = {"grace_period_s": 900, **operator}
    return ResolvedPolicy(load_policy(2, {"driver": {"managed_by_operator": True},
                                          "operator": op}), "operator-clusterpolicy")


def test_driver_loaded_waits_for_the_operators_driver_within_the_grace_period(tmp_path):
    out = DRIVER_LOADED.run(_host(tmp_path, 120.0), _policy())
    assert (out.status, out.skip) == (Status.SKIP, SKIP_INPUT_MISSING)
    assert out.summary == ("waiting for the GPU Operator driver: kernel module not loaded "
                           "(/proc/driver/nvidia/version absent); no libnvidia-ml under "
                           f"/run/nvidia/driver; {MARKERS} (up 120s of a 900s grace period)")


def test_driver_loaded_fails_once_the_grace_period_has_passed(tmp_path):
    out = DRIVER_LOADED.run(_host(tmp_path, 5000.0, {"/proc/driver/nvidia/version": MODULE}),
                            _policy())
    assert (out.status, out.code) == (Status.FAIL, OPERATOR_DRIVER_LATE)
    assert out.summary == ("the GPU Operator driver is still not on the host 5000s after boot "
                           "(grace period 900s): no libnvidia-ml under /run/nvidia/driver; "
                           f"{MARKERS}")


def test_driver_loaded_judges_the_operators_driver_once_it_is_there(tmp_path):
    # Module and library present: no wait; the device nodes were not captured (no facts).
    h = _host(tmp_path, 5000.0, {"/proc/driver/nvidia/version": MODULE, LIB: ""})
    out = DRIVER_LOADED.run(h, _policy())
    assert (out.status, out.code) == (Status.UNKNOWN, "dev-nodes-unknown")


def test_driver_branch_waits_even_past_the_grace_period(tmp_path):
    out = DRIVER_BRANCH.run(_host(tmp_path, 5000.0, {"/proc/driver/nvidia/version": MODULE}),
                            _policy(judge_managed=True))
    assert (out.status, out.skip, out.code) == (Status.SKIP, SKIP_INPUT_MISSING, None)
    assert out.summary == ("waiting for the GPU Operator driver: no libnvidia-ml under "
                           f"/run/nvidia/driver; {MARKERS} (up 5000s of a 900s grace period)")


def test_driver_branch_judges_the_operators_driver_once_it_is_there(tmp_path):
    h = _host(tmp_path, 5000.0, {"/proc/driver/nvidia/version": MODULE, LIB: ""})
    out = DRIVER_BRANCH.run(h, _policy(judge_managed=True))
    assert out.status != Status.SKIP
    assert out.details["version"] == "570.86.15" and out.details["branch"] == 570
    # named as the operator's, with the root it was read under
    assert out.details["driver_root"] == "/run/nvidia/driver"
    assert out.summary.startswith("GPU Operator driver 570.86.15 (proprietary module), R570 ")
