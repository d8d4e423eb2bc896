"""The GPU Operator-managed driver and toolkit on the operator fixture bundles
(tests/fixtures/families/operator.py), under policy version 2 (what a config without
`policy_version` gets) and pinned to version 1.

Expected values are written by hand from the bundles' own files and the sources they cite:
the 580.173.02 module (tests/fixtures/upstream), the libnvidia-ml placed under
/run/nvidia/driver, the validator marker names of NVIDIA/gpu-operator
cmd/nvidia-validator/main.go, /proc/uptime (240-1800 s) against policy_v2.yaml's 900 s grace
period, and the path minimums of policy_v1.yaml. The checks run through the engine with each
bundle's test-config.yaml, as `check --bundle B --config B/test-config.yaml` runs them;
gpu-operator is passed explicitly (the registry lists it once it is registered).
"""
from typing import Any, Dict, Optional

import pytest

from agent.cli_common import resolve_policy
from agent.config import load_config
from agent.engine import Engine
from agent.host.bundle import load_bundle
from agent.model import CheckResult
from checks.driver.driver_branch import DRIVER_BRANCH
from checks.driver.driver_library_match import DRIVER_LIBRARY_MATCH
from checks.driver.driver_loaded import DRIVER_LOADED
from checks.nvml_responsive import NVML_RESPONSIVE
from checks.operator.gpu_operator import GPU_OPERATOR
from checks.toolkit_version import TOOLKIT_VERSION
from tests.conftest import BUNDLES

CHECKS = (DRIVER_LOADED, DRIVER_BRANCH, DRIVER_LIBRARY_MATCH, NVML_RESPONSIVE, TOOLKIT_VERSION,
          GPU_OPERATOR)
DRIVER_DEPENDANTS = ("driver-branch", "driver-library-match", "nvml-responsive")
ALL_MARKERS = [".driver-ctr-ready", "driver-ready", "toolkit-ready", "cuda-ready", "plugin-ready"]
NO_MARKERS = "no validator markers in /run/nvidia/validations"


def run(name: str, version: Optional[int] = None, path: Optional[str] = None,
        policy: Optional[Dict[str, Any]] = None) -> Dict[str, CheckResult]:
    """The six checks on bundle ``name`` with its test-config.yaml, optionally pinned to
    ``version``, on another ``path``, or with more ``policy`` overrides."""
    config, origin = load_config(str(BUNDLES / name / "test-config.yaml"))
    if version is not None or policy:
        data = config.model_dump()
        if version is not None:
            data["policy_version"] = version
        for section, values in (policy or {}).items():
            data["policy"].setdefault(section, {}).update(values)
        config = type(config).model_validate(data)
    pol = resolve_policy(config, origin, path or config.allocation_path)
    loaded = load_bundle(str(BUNDLES / name))
    try:
        results = Engine(CHECKS).run(loaded.host, pol)
    finally:
        loaded.close()
    return {r.id: r for r in results}


def verdict(r: CheckResult):
    return (str(r.status), r.code if r.code else r.skip)


# --- before the operator ran ----------------------------------------------------------------

def test_before_the_operator_ran_every_driver_check_waits_naming_the_markers():
    got = run("driver-loaded-operator-waiting")
    waiting = ("waiting for the GPU Operator driver: kernel module not loaded "
               "(/proc/driver/nvidia/version absent); no libnvidia-ml under /run/nvidia/driver; "
               f"{NO_MARKERS} (up 240s of a 900s grace period)")
    for cid in ("driver-loaded",) + DRIVER_DEPENDANTS:
        assert verdict(got[cid]) == ("skip", "input-missing"), cid
        assert got[cid].summary == waiting, cid
        assert got[cid].details["markers"] == []
        assert got[cid].details["uptime_s"] == 240 and got[cid].details["grace_period_s"] == 900
    assert verdict(got["toolkit-version"]) == ("skip", "input-missing")
    assert got["toolkit-version"].summary.startswith(
        "waiting for the GPU Operator toolkit: no nvidia-container-runtime in "
        "/usr/local/nvidia/toolkit")
    # Nothing to conflict with: the operator has simply not run yet.
    assert verdict(got["gpu-operator"]) == ("pass", None)


def test_waiting_for_the_toolkit_names_the_markers_the_driver_already_wrote():
    got = run("toolkit-version-operator-waiting")
    assert verdict(got["toolkit-version"]) == ("skip", "input-missing")
    assert got["toolkit-version"].summary == (
        "waiting for the GPU Operator toolkit: no nvidia-container-runtime in "
        "/usr/local/nvidia/toolkit; validator markers in /run/nvidia/validations: "
        ".driver-ctr-ready, driver-ready (up 400s of a 900s grace period)")
    assert got["toolkit-version"].details["markers"] == [".driver-ctr-ready", "driver-ready"]
    assert verdict(got["driver-branch"]) == ("pass", None)


def test_before_the_operator_ran_under_policy_v1_waits_without_a_grace_period():
    got = run("driver-loaded-operator-waiting", version=1)
    assert verdict(got["driver-loaded"]) == ("skip", "input-missing")
    assert got["driver-loaded"].summary.endswith("(up 240s, no grace period set)")
    assert verdict(got["nvml-responsive"]) == ("skip", "input-missing")  # not library-not-found
    # Version 1's own verdicts: the operator's driver and toolkit are not judged.
    assert got["driver-branch"].summary == (
        "the GPU Operator installs the driver on the operator-clusterpolicy path")
    assert verdict(got["driver-branch"]) == ("skip", "not-applicable")
    assert verdict(got["toolkit-version"]) == ("skip", "not-applicable")
    assert verdict(got["gpu-operator"]) == ("skip", "not-applicable")  # since policy 2


# --- after it ran ---------------------------------------------------------------------------

def test_after_the_operator_ran_its_driver_is_judged_under_its_root_ubuntu_layout():
    got = run("driver-loaded-operator-ready")
    assert {cid: verdict(r) for cid, r in got.items()} == {cid: ("pass", None) for cid in got}
    assert got["driver-branch"].summary == (
        "GPU Operator driver 580.173.02 (proprietary module), R580 long-term support branch; "
        "meets the operator-clusterpolicy minimum R535")
    assert got["driver-library-match"].details["libnvidia_ml"] == {
        "/run/nvidia/driver/usr/lib/x86_64-linux-gnu": "580.173.02"}
    assert got["toolkit-version"].summary == (
        "GPU Operator toolkit 1.18.0 in /usr/local/nvidia/toolkit (installed)")
    assert got["gpu-operator"].details["markers"] == ALL_MARKERS
    assert ("validator markers in /run/nvidia/validations: .driver-ctr-ready, driver-ready, "
            "toolkit-ready, cuda-ready, plugin-ready; no ownership conflict"
            ) in got["gpu-operator"].summary
    assert got["gpu-operator"].details["driver_ready"]["IS_HOST_DRIVER"] == "false"


def test_after_the_operator_ran_rhel_layout_on_operator_gpucluster():
    got = run("driver-branch-operator-rhel-ready")
    assert {cid: verdict(r) for cid, r in got.items()} == {cid: ("pass", None) for cid in got}
    assert got["driver-branch"].summary.endswith("meets the operator-gpucluster minimum R580")
    assert got["driver-library-match"].details["libnvidia_ml"] == {
        "/run/nvidia/driver/usr/lib64": "580.173.02"}
    assert got["toolkit-version"].summary == (
        "GPU Operator toolkit 1.18.0 in /usr/local/nvidia/toolkit (>= 1.18.0)")
    assert got["gpu-operator"].details["package_db"] == ["rpm"]


def test_the_operator_driver_below_the_path_minimum_fails_like_a_host_driver():
    # 580.173.02 on operator-gpucluster meets R580; a fleet allowing only R570 rejects it.
    got = run("driver-branch-operator-rhel-ready", policy={"driver": {"allowed_branches": [570]}})
    assert verdict(got["driver-branch"]) == ("fail", "branch-not-allowed")


def test_module_against_the_roots_libnvidia_ml():
    got = run("driver-library-match-operator-mismatch")
    assert verdict(got["driver-library-match"]) == ("fail", "library-mismatch")
    assert got["driver-library-match"].summary == (
        "Driver/library version mismatch: kernel module 580.173.02, the GPU Operator driver's "
        "libnvidia-ml 580.178 in /run/nvidia/driver/usr/lib/x86_64-linux-gnu")
    assert "driver container" in got["driver-library-match"].remediation


def test_after_the_operator_ran_policy_v1_keeps_its_verdicts():
    got = run("driver-loaded-operator-ready", version=1)
    assert verdict(got["driver-loaded"]) == ("pass", None)
    assert verdict(got["driver-branch"]) == ("skip", "not-applicable")
    # Version 1 compares the module with the host's own directories: none there.
    assert verdict(got["driver-library-match"]) == ("skip", "input-missing")
    assert verdict(got["toolkit-version"]) == ("skip", "not-applicable")


# --- past the grace period ------------------------------------------------------------------

def test_past_the_grace_period_driver_loaded_fails_and_the_others_still_wait():
    got = run("driver-loaded-operator-late")
    assert verdict(got["driver-loaded"]) == ("fail", "operator-driver-late")
    assert got["driver-loaded"].summary == (
        "the GPU Operator driver is still not on the host 1800s after boot (grace period "
        "900s): kernel module not loaded (/proc/driver/nvidia/version absent); no "
        f"libnvidia-ml under /run/nvidia/driver; {NO_MARKERS}")
    for cid in DRIVER_DEPENDANTS:  # driver-loaded owns the failure
        assert verdict(got[cid]) == ("skip", "input-missing"), cid
        assert got[cid].summary.endswith("(up 1800s of a 900s grace period)")
    assert verdict(got["toolkit-version"]) == ("pass", None)  # host-owned toolkit


def test_past_the_grace_period_under_policy_v1_still_waits():
    got = run("driver-loaded-operator-late", version=1)
    assert verdict(got["driver-loaded"]) == ("skip", "input-missing")
    got = run("toolkit-version-operator-late", version=1)
    assert verdict(got["toolkit-version"]) == ("skip", "not-applicable")


def test_toolkit_past_the_grace_period_fails_naming_the_markers():
    got = run("toolkit-version-operator-late")
    assert verdict(got["toolkit-version"]) == ("fail", "operator-toolkit-late")
    assert got["toolkit-version"].summary == (
        "the GPU Operator toolkit is still not on the host 1200s after boot (grace period "
        "900s): no nvidia-container-runtime in /usr/local/nvidia/toolkit; validator markers "
        "in /run/nvidia/validations: .driver-ctr-ready, driver-ready")


def test_a_longer_grace_period_turns_the_failure_back_into_waiting():
    got = run("driver-loaded-operator-late", policy={"operator": {"grace_period_s": 3600}})
    assert verdict(got["driver-loaded"]) == ("skip", "input-missing")


# --- ownership conflicts --------------------------------------------------------------------

@pytest.mark.parametrize("name, code, needle", [
    ("gpu-operator-host-driver-conflict", "host-driver-beside-operator",
     "a host-installed driver while the GPU Operator installs the driver (package "
     "nvidia-driver-580-server 580.173.02-0ubuntu0.24.04.1; kernel module loaded with "
     "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1)"),
    ("gpu-operator-operator-driver-unmanaged", "operator-driver-unmanaged",
     "/run/nvidia/driver/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1; "
     "/run/nvidia/validations/.driver-ctr-ready; the operator validator's driver-ready says "
     "IS_HOST_DRIVER=false"),
    ("gpu-operator-host-toolkit-conflict", "host-toolkit-beside-operator",
     "(package nvidia-container-toolkit 1.18.0-1; package nvidia-container-toolkit-base "
     "1.18.0-1; /usr/bin/nvidia-container-runtime)"),
    ("gpu-operator-operator-toolkit-unmanaged", "operator-toolkit-unmanaged",
     "/usr/local/nvidia/toolkit/nvidia-container-runtime"),
])
def test_each_ownership_conflict_fails_with_its_code(name, code, needle):
    got = run(name)["gpu-operator"]
    assert verdict(got) == ("fail", code)
    assert got.summary.startswith("ownership conflict: ")
    assert needle in got.summary
    assert got.details["conflicts"] == [code]
    fix = GPU_OPERATOR.failure(code).fix
    label = "nvidia.com/gpu.deploy.driver" if "driver" in code else \
        "nvidia.com/gpu.deploy.container-toolkit"
    assert f"`{label}=false`" in fix


def test_the_same_conflict_host_pinned_to_v1_is_not_judged():
    got = run("gpu-operator-host-driver-conflict-v1")
    assert verdict(got["gpu-operator"]) == ("skip", "not-applicable")
    assert verdict(got["driver-loaded"]) == ("skip", "input-missing")
    assert verdict(got["driver-branch"]) == ("skip", "not-applicable")
    assert verdict(got["driver-library-match"]) == ("pass", None)  # the host's own libraries
    # The same host under version 2 fails (the v2 bundle is its twin).
    assert verdict(run("gpu-operator-host-driver-conflict")["gpu-operator"]) == (
        "fail", "host-driver-beside-operator")


def test_a_conflict_is_reported_not_failed_when_the_gate_is_off():
    got = run("gpu-operator-host-driver-conflict",
              policy={"operator": {"ownership_conflicts": False}})["gpu-operator"]
    assert verdict(got) == ("pass", None)
    assert "ownership conflict not judged (policy.operator.ownership_conflicts false)" in (
        got.summary)
    assert got.details["conflicts"] == ["host-driver-beside-operator"]


def test_gpu_operator_on_other_paths():
    # No operator trace on the host: not applicable on dra and device-plugin.
    plain = run("gpu-operator-host-toolkit-conflict", path="dra")["gpu-operator"]
    assert verdict(plain) == ("fail", "operator-toolkit-unmanaged")  # its toolkit dir is there
    got = run("gpu-operator-host-driver-conflict", path="device-plugin")["gpu-operator"]
    assert verdict(got) == ("skip", "not-applicable")
    assert got.summary == "no GPU Operator on the device-plugin path and no trace of it on the host"
    # The operator's driver on a dra host: its driver is not the host's the path expects.
    got = run("driver-loaded-operator-ready", path="dra")["gpu-operator"]
    assert verdict(got) == ("fail", "operator-driver-unmanaged")


def test_managed_by_operator_is_ignored_off_the_operator_paths():
    # device-plugin with managed_by_operator true: the host's driver is judged as always.
    got = run("driver-loaded-operator-waiting", path="device-plugin")
    assert verdict(got["driver-loaded"]) == ("fail", "module-not-loaded")
    assert verdict(got["nvml-responsive"]) == ("fail", "library-not-found")


def _late_host_with_upgrade_state(tmp_path, state: str) -> Dict[str, CheckResult]:
    """driver-loaded-operator-late (up 1800 s, no driver) with the Node's upgrade-state label."""
    import json
    import shutil

    dest = tmp_path / "b"
    shutil.copytree(BUNDLES / "driver-loaded-operator-late", dest, symlinks=True)
    facts_file = dest / "host.json"
    facts = json.loads(facts_file.read_text()) if facts_file.exists() else {}
    facts["node"] = {"metadata": {"name": "n", "labels": {
        "nvidia.com/gpu-driver-upgrade-state": state}}}
    facts_file.write_text(json.dumps(facts))
    config, origin = load_config(str(dest / "test-config.yaml"))
    loaded = load_bundle(str(dest))
    try:
        results = Engine(CHECKS).run(loaded.host, resolve_policy(config, origin,
                                                                 config.allocation_path))
    finally:
        loaded.close()
    return {r.id: r for r in results}


def test_while_the_operator_replaces_the_driver_past_the_grace_period_it_still_waits(tmp_path):
    # pod-restart-required: the upgrade controller deleted the driver pod (k8s-operator-libs
    # common_manager.go ProcessPodRestartNodes); no driver is the plan, not a late operator.
    got = _late_host_with_upgrade_state(tmp_path, "pod-restart-required")
    assert verdict(got["driver-loaded"]) == ("skip", "input-missing")
    assert got["driver-loaded"].summary.endswith(
        "(GPU Operator driver upgrade in progress: "
        "nvidia.com/gpu-driver-upgrade-state=pod-restart-required)")
    assert got["driver-loaded"].details["driver_upgrade_state"] == "pod-restart-required"


def test_an_upgrade_state_that_is_not_a_replacement_leaves_the_grace_period_in_force(tmp_path):
    # upgrade-done: the new driver should be there; cordon-required: the old one still is.
    for state in ("upgrade-done", "cordon-required"):
        got = _late_host_with_upgrade_state(tmp_path / state, state)
        assert verdict(got["driver-loaded"]) == ("fail", "operator-driver-late"), state
