"""nvml-responsive by direct calls on hand-written snapshots (docs/gpu-snapshot.md): the pass
summary whole (NVML version, the worker's wall time to two decimals, the GPU count, the
driver, the GPUs NVML could not read) and its details; an error's summary, code, message
(bounded to 200 characters, not repeated when the summary already holds it) and details; the
agent's own states (not a verdict); a kind the table does not know. Expected values by hand
from checks/nvml_responsive.py."""
from typing import Any, Dict, Optional

import pytest

from agent.host.seam import Host, StaticFacts, StaticGpus
from agent.model import Status
from checks.nvml_responsive import NVML_RESPONSIVE
from checks.policy import ResolvedPolicy, load_policy


def _run(tmp_path, snap: Optional[Dict[str, Any]]):
    root = tmp_path / "root"
    root.mkdir(exist_ok=True)
    h = Host(root, gpus=StaticGpus(snap), facts=StaticFacts({}))
    return NVML_RESPONSIVE.run(h, ResolvedPolicy(load_policy(2), "dra"))


def _ok(**extra: Any) -> Dict[str, Any]:
    snap: Dict[str, Any] = {"schema_version": 1, "source": "nvml", "error": None,
                            "nvml_version": "12.580.82", "driver_version": "580.82.07",
                            "cuda_driver_version": 13000, "device_count": 2,
                            "gpus": [{"index": 0}, {"index": 1}]}
    snap.update(extra)
    return snap


def test_the_pass_summary_and_details_whole(tmp_path):
    out = _run(tmp_path, _ok(worker={"wall_s": 0.4567}))
    assert out.status == Status.PASS
    assert out.summary == "NVML 12.580.82 answered in 0.46s: 2 GPU(s), driver 580.82.07"
    assert dict(out.details) == {"device_count": 2, "driver_version": "580.82.07",
                                 "nvml_version": "12.580.82", "cuda_driver_version": 13000}


def test_an_integer_wall_time_is_printed_too_and_none_is_left_out(tmp_path):
    assert _run(tmp_path, _ok(worker={"wall_s": 2})).summary == (
        "NVML 12.580.82 answered in 2.00s: 2 GPU(s), driver 580.82.07")
    assert _run(tmp_path, _ok(worker={})).summary == (
        "NVML 12.580.82 answered: 2 GPU(s), driver 580.82.07")


def test_unreadable_gpus_are_named_and_versions_unknown_are_question_marks(tmp_path):
    snap = _ok(gpus=[{"index": 0}, {"index": 3, "error": {"kind": "gpu_lost"}},
                     {"index": 5, "error": {"kind": "unknown"}}], device_count=3)
    del snap["nvml_version"]
    snap["driver_version"] = ""
    out = _run(tmp_path, snap)
    assert out.status == Status.PASS
    assert out.summary == ("NVML ? answered: 3 GPU(s), driver ?; GPU 3, 5 not readable "
                           "(see gpu-count)")


def test_without_a_device_count_the_gpu_list_is_counted(tmp_path):
    snap = _ok()
    del snap["device_count"]
    out = _run(tmp_path, snap)
    assert out.summary == "NVML 12.580.82 answered: 2 GPU(s), driver 580.82.07"
    assert out.details["device_count"] == 2


def _err(kind: Optional[str], message: Optional[str] = None, code: Any = None):
    err: Dict[str, Any] = {}
    if kind is not None:
        err["kind"] = kind
    if message is not None:
        err["message"] = message
    if code is not None:
        err["nvml_code"] = code
    return {"schema_version": 1, "source": "nvml", "error": err}


def test_an_error_kind_gets_its_summary_code_and_details(tmp_path):
    out = _run(tmp_path, _err("no_permission", "Insufficient Permissions", 4))
    assert (out.status, out.code) == (Status.FAIL, "no-permission")
    assert out.summary == ("NVML: insufficient permissions to open the NVIDIA device nodes "
                           "(Insufficient Permissions)")
    assert dict(out.details) == {"kind": "no_permission", "message": "Insufficient Permissions",
                                 "nvml_code": 4}


def test_a_message_the_summary_already_holds_is_not_repeated(tmp_path):
    out = _run(tmp_path, _err("timeout", "driver unresponsive"))
    assert (out.code, out.summary) == ("nvml-timeout", "driver unresponsive")


def test_no_message_adds_nothing(tmp_path):
    out = _run(tmp_path, _err("gpu_lost"))
    assert (out.code, out.summary) == ("gpu-lost", "NVML: a GPU is lost (fell off the bus)")
    assert dict(out.details) == {"kind": "gpu_lost", "message": "", "nvml_code": None}


def test_an_unknown_kind_is_nvml_failed_naming_it(tmp_path):
    out = _run(tmp_path, _err("nvml_error", "Unknown Error", 999))
    assert (out.status, out.code) == (Status.FAIL, "nvml-failed")
    assert out.summary == "NVML failed: nvml_error (Unknown Error)"


def test_an_error_without_a_kind_is_called_unknown(tmp_path):
    out = _run(tmp_path, _err(None, "boom"))
    assert (out.code, out.summary) == ("nvml-failed", "NVML failed: unknown (boom)")
    assert out.details["kind"] == "unknown"


def test_a_long_message_is_cut_to_200_characters(tmp_path):
    message = "m" * 150 + "n" * 100
    out = _run(tmp_path, _err("nvml_error", message))
    assert out.details["message"] == "m" * 150 + "n" * 50
    assert out.summary == f"NVML failed: nvml_error ({'m' * 150 + 'n' * 50})"


@pytest.mark.parametrize("kind", ["maintenance", "worker_failed", "worker_error"])
def test_the_agents_own_states_are_unknown_not_read(tmp_path, kind):
    out = _run(tmp_path, _err(kind, "window until 04:00"))
    assert (out.status, out.code) == (Status.UNKNOWN, "nvml-not-read")
    assert out.summary == f"NVML not read: {kind} (window until 04:00)"
    bare = _run(tmp_path, _err(kind))
    assert bare.summary == f"NVML not read: {kind}"
    assert dict(bare.details) == {"kind": kind, "message": "", "nvml_code": None}


def test_no_snapshot_is_unknown_snapshot_missing(tmp_path):
    out = _run(tmp_path, None)
    assert (out.status, out.code) == (Status.UNKNOWN, "snapshot-missing")
    assert out.summary == "GPU snapshot not captured for this host (no gpus.json)"


def test_a_malformed_snapshot_is_unknown_snapshot_malformed(tmp_path):
    out = _run(tmp_path, _ok(device_count="two"))
    assert (out.status, out.code) == (Status.UNKNOWN, "snapshot-malformed")
    assert "device_count" in out.summary


def test_the_device_count_is_nvmls_even_when_the_list_is_shorter(tmp_path):
    # device_count is nvmlDeviceGetCount_v2's answer; the list holds the GPUs read.
    out = _run(tmp_path, _ok(device_count=4))
    assert out.summary == "NVML 12.580.82 answered: 4 GPU(s), driver 580.82.07"
    assert out.details["device_count"] == 4


# -- the GPU Operator's driver (policy v2, driver.managed_by_operator, an operator-* path) -----
def _operator_run(tmp_path, snap: Any):
    root = tmp_path / "root"
    (root / "proc").mkdir(parents=True, exist_ok=True)
    (root / "proc/uptime").write_text("300.0 100.0\n")
    h = Host(root, gpus=StaticGpus(snap), facts=StaticFacts({}))
    policy = load_policy(2, {"driver": {"managed_by_operator": True},
                             "operator": {"grace_period_s": 900}})
    return NVML_RESPONSIVE.run(h, ResolvedPolicy(policy, "operator-clusterpolicy"))


WAIT = ("waiting for the GPU Operator driver: kernel module not loaded "
        "(/proc/driver/nvidia/version absent); no libnvidia-ml under /run/nvidia/driver; no "
        "validator markers in /run/nvidia/validations (up 300s of a 900s grace period)")


def test_no_snapshot_while_the_operators_driver_is_not_there_is_its_wait(tmp_path):
    out = _operator_run(tmp_path, None)
    assert (out.status, out.summary) == (Status.SKIP, WAIT)


def test_an_nvml_error_while_the_operators_driver_is_not_there_is_its_wait(tmp_path):
    out = _operator_run(tmp_path, _err("library_not_found", "libnvidia-ml.so.1"))
    assert (out.status, out.summary) == (Status.SKIP, WAIT)


def test_the_agents_own_state_keeps_its_summary_while_the_driver_is_awaited(tmp_path):
    out = _operator_run(tmp_path, _err("maintenance"))
    assert (out.status, out.code, out.summary) == (
        Status.UNKNOWN, "nvml-not-read", "NVML not read: maintenance")


def test_a_snapshot_that_is_no_object_is_malformed_on_the_operators_path_too(tmp_path):
    out = _operator_run(tmp_path, ["not", "an", "object"])
    assert (out.status, out.code) == (Status.UNKNOWN, "snapshot-malformed")
