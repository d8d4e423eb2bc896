"""checks/operator/state.py and policy.py piece by piece, and what `collect` captures for the
operator-managed driver and toolkit.

Expected values are written by hand: the marker names of NVIDIA/gpu-operator
cmd/nvidia-validator/main.go, the driver-ready lines of its Driver.createStatusFile
("IS_HOST_DRIVER=false", "NVIDIA_DRIVER_ROOT=/run/nvidia/driver"), proc(5)'s /proc/uptime
("<seconds up> <seconds idle>"), and policy_v2.yaml's operator section (900 s, gates on).
"""
import datetime

import pytest

from agent.cli_common import resolve_policy
from agent.config import Config, load_config
from agent.engine import Engine
from agent.host.bundle import load_bundle
from agent.host.collect import collect
from agent.host.seam import Host
from agent.safeio.schema import ValidationError
from checks.driver.driver_branch import DRIVER_BRANCH
from checks.driver.driver_library_match import DRIVER_LIBRARY_MATCH
from checks.driver.driver_loaded import DRIVER_LOADED
from checks.nvml_responsive import NVML_RESPONSIVE
from checks.operator.gpu_operator import GPU_OPERATOR
from checks.operator.state import (
    Waiting,
    driver_ready_fields,
    driver_waiting,
    markers,
    uptime_s,
)
from checks.policy import ResolvedPolicy, load_policy
from checks.toolkit_version import TOOLKIT_VERSION
from tests.conftest import BUNDLES

CHECKS = (DRIVER_LOADED, DRIVER_BRANCH, DRIVER_LIBRARY_MATCH, NVML_RESPONSIVE, TOOLKIT_VERSION,
          GPU_OPERATOR)


def policy(version: int = 2, path: str = "operator-clusterpolicy", **operator) -> ResolvedPolicy:
    overrides = {"driver": {"managed_by_operator": True}}
    if operator:
        overrides["operator"] = operator
    return ResolvedPolicy(load_policy(version, overrides), path,
                          today=datetime.date(2026, 12, 1), settings=Config().model_dump())


def put(root, path: str, text: str = "") -> None:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


# --- policy ---------------------------------------------------------------------------------

def test_policy_v1_gets_the_defaults_and_v2_turns_the_gates_on():
    v1, v2 = load_policy(1).operator, load_policy(2).operator
    assert (v1.driver_root, v1.toolkit_root, v1.validations_dir) == (
        "/run/nvidia/driver", "/usr/local/nvidia/toolkit", "/run/nvidia/validations")
    assert (v1.grace_period_s, v1.ownership_conflicts, v1.judge_managed) == (None, False, False)
    assert (v2.grace_period_s, v2.ownership_conflicts, v2.judge_managed) == (900, True, True)
    assert v2.driver_root == "/run/nvidia/driver"


@pytest.mark.parametrize("field, value", [
    ("driver_root", "run/nvidia/driver"),  # relative
    ("toolkit_root", "/usr/local/*/toolkit"),  # a glob character
    ("validations_dir", "/run/nvidia/[x]"),
    ("grace_period_s", -1),
    ("unknown_key", 1),
])
def test_policy_rejects_bad_values(field, value):
    with pytest.raises(ValidationError) as err:
        load_policy(2, {"operator": {field: value}})
    assert err.value.errors()[0]["loc"] == ("operator", field)


def test_a_config_can_move_the_driver_root(tmp_path):
    put(tmp_path, "/proc/driver/nvidia/version", "NVRM version: x\n")
    put(tmp_path, "/opt/drv/usr/lib64/libnvidia-ml.so.1")
    host = Host(tmp_path)
    assert driver_waiting(host, policy(driver_root="/opt/drv")) is None
    waiting = driver_waiting(host, policy())
    assert waiting is not None and waiting.missing == "no libnvidia-ml under /run/nvidia/driver"


# --- markers, driver-ready, uptime ----------------------------------------------------------

def test_markers_known_first_in_the_operators_order_then_the_rest_sorted(tmp_path):
    for name in ("workload-type", "plugin-ready", "driver-ready", ".driver-ctr-ready",
                 "nvidia-fs-ready"):
        put(tmp_path, f"/run/nvidia/validations/{name}")
    (tmp_path / "run/nvidia/validations/a-directory").mkdir()  # not a marker file
    assert markers(Host(tmp_path), policy()) == [
        ".driver-ctr-ready", "driver-ready", "plugin-ready", "nvidia-fs-ready", "workload-type"]
    assert markers(Host(tmp_path / "nothing"), policy()) == []


def test_driver_ready_lines(tmp_path):
    put(tmp_path, "/run/nvidia/validations/driver-ready",
        "IS_HOST_DRIVER=false\nNVIDIA_DRIVER_ROOT=/run/nvidia/driver\nnot a field\n=x\n")
    assert driver_ready_fields(Host(tmp_path), policy()) == {
        "IS_HOST_DRIVER": "false", "NVIDIA_DRIVER_ROOT": "/run/nvidia/driver"}


@pytest.mark.parametrize("text, expected", [
    ("350735.47 234388.90\n", 350735.47), ("12", 12.0), ("", None), ("up 5 days\n", None)])
def test_uptime(tmp_path, text, expected):
    put(tmp_path, "/proc/uptime", text)
    assert uptime_s(Host(tmp_path)) == expected


def test_uptime_absent_is_none(tmp_path):
    assert uptime_s(Host(tmp_path)) is None


@pytest.mark.parametrize("uptime, grace, late", [
    (901.0, 900, True), (900.0, 900, False), (10.0, 900, False),
    (100000.0, None, False),  # version 1: waiting never fails
    (None, 900, False),  # uptime unknown: cannot say it is late
])
def test_late_only_strictly_past_the_grace_period(uptime, grace, late):
    assert Waiting("driver", "x", [], uptime, grace).late is late


def test_unknown_uptime_keeps_waiting_and_says_so(tmp_path):
    out = DRIVER_LOADED.run(Host(tmp_path), policy())
    assert (str(out.status), out.skip) == ("skip", "input-missing")
    assert out.summary.endswith("(uptime unknown (/proc/uptime unreadable))")


def test_the_module_without_the_roots_libraries_is_still_waiting(tmp_path):
    # A driver container that loaded the module and then died: its root is gone.
    put(tmp_path, "/proc/driver/nvidia/version",
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.173.02  Tue Jun 23 2026\n")
    put(tmp_path, "/proc/uptime", "1000.0 1.0\n")
    out = DRIVER_LOADED.run(Host(tmp_path), policy())
    assert (str(out.status), out.code) == ("fail", "operator-driver-late")
    assert "no libnvidia-ml under /run/nvidia/driver" in out.summary
    assert "kernel module not loaded" not in out.summary


# --- what collect captures ------------------------------------------------------------------

def test_the_checks_declare_the_operator_roots_for_collect():
    presence = set(DRIVER_LIBRARY_MATCH.presence)
    for lib_dir in ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64",
                    "/usr/lib"):
        assert f"/run/nvidia/driver{lib_dir}/libnvidia-ml.so*" in presence
        assert f"{lib_dir}/libnvidia-ml.so*" in presence  # the host's own, as before
    for check in (DRIVER_LOADED, DRIVER_BRANCH, NVML_RESPONSIVE, GPU_OPERATOR):
        assert "/run/nvidia/validations/*" in check.presence, check.id
        assert "/run/nvidia/driver/usr/lib64/libnvidia-ml.so*" in check.presence, check.id
    assert "/proc/uptime" in DRIVER_LOADED.reads and "/proc/uptime" in TOOLKIT_VERSION.reads
    assert "/usr/local/nvidia/toolkit/nvidia-container-runtime" in TOOLKIT_VERSION.presence
    assert ("/usr/local/nvidia/toolkit/nvidia-ctk", "--version") in TOOLKIT_VERSION.runs
    assert "/run/nvidia/validations/driver-ready" in GPU_OPERATOR.reads
    assert "/var/lib/dpkg/status" in GPU_OPERATOR.reads


@pytest.mark.parametrize("name", ["driver-loaded-operator-ready",
                                  "driver-branch-operator-rhel-ready",
                                  "gpu-operator-host-driver-conflict"])
def test_a_collected_bundle_judges_as_the_host_did(tmp_path, name):
    """collect over a bundle's host with these checks, then the same checks on what it wrote:
    the same verdicts, so the declared reads are all they need."""
    config, origin = load_config(str(BUNDLES / name / "test-config.yaml"))
    pol = resolve_policy(config, origin, config.allocation_path)
    source = load_bundle(str(BUNDLES / name))
    try:
        before = {r.id: (r.status, r.code, r.skip, r.summary)
                  for r in Engine(CHECKS).run(source.host, pol)}
        out = collect(source.host, CHECKS, str(tmp_path / "again"))
    finally:
        source.close()
    ready = name != "gpu-operator-host-driver-conflict"
    assert (out / "root/run/nvidia/validations/driver-ready").is_file() == ready
    lib_dir = "usr/lib64" if "rhel" in name else "usr/lib/x86_64-linux-gnu"
    assert (out / f"root/run/nvidia/driver/{lib_dir}/libnvidia-ml.so.1").is_symlink() == ready
    again = load_bundle(str(out))
    try:
        after = {r.id: (r.status, r.code, r.skip, r.summary)
                 for r in Engine(CHECKS).run(again.host, pol)}
    finally:
        again.close()
    assert after == before


@pytest.mark.parametrize("error, expected", [
    # NVML found no library: the operator's driver is not there yet, so wait.
    ({"kind": "library_not_found", "message": "NVML Shared Library Not Found"},
     ("skip", "input-missing", None)),
    # The agent released NVML (the operator's driver upgrade): its own summary stays.
    ({"kind": "maintenance", "message": "GPU Operator driver upgrade"},
     ("unknown", None, "nvml-not-read")),
])
def test_nvml_responsive_waits_only_for_a_missing_nvml(tmp_path, error, expected):
    from agent.host.seam import StaticGpus

    host = Host(tmp_path, gpus=StaticGpus({"schema_version": 1, "gpus": [], "error": error}))
    out = NVML_RESPONSIVE.run(host, policy())
    assert (str(out.status), out.skip, out.code) == expected
    if expected[0] == "skip":
        assert out.summary.startswith("waiting for the GPU Operator driver: kernel module not "
                                      "loaded")
    # Off the operator paths NVML's own verdict stands.
    assert str(NVML_RESPONSIVE.run(host, policy(path="dra")).status) != "skip"
