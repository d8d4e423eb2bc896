"""gpu-workload (checks/workload/gpu_workload.py) on hand-written `workload` records: the exact
verdict, summary, failure code and details for each way a run ends.

Records have the shape agent/host/workload_record.py Attempt.record() writes; UUID lines are
`nvidia-smi -L`'s ("GPU <i>: <name> (UUID: GPU-...)", NVIDIA nvidia-smi documentation,
-L/--list-gpus). The route a path judges: DRA paths the CDI route, device-plugin paths the
runtime-handler route (docs/workload.md).
"""
from types import SimpleNamespace
from typing import Any, Dict, List, Optional

import pytest

from agent.host.seam import Host, StaticFacts, StaticGpus
from agent.model import SKIP_CONFIGURED, SKIP_INPUT_MISSING, SKIP_NOT_APPLICABLE, Outcome, Status
from checks.policy import ResolvedPolicy, load_policy
from checks.workload.gpu_workload import GPU_WORKLOAD

U1 = "GPU-11111111-2222-3333-4444-555555555555"
U2 = "GPU-66666666-7777-8888-9999-aaaaaaaaaaaa"
IMAGE = "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"
LISTING = f"GPU 0: NVIDIA H100 80GB HBM3 (UUID: {U1})\nGPU 1: NVIDIA H100 80GB HBM3 (UUID:  {U2})\n"


def record(**over: Any) -> Dict[str, Any]:
    base = {"route": "cri", "mode": "cdi", "path": "dra", "handler": None,
            "cdi_device": "nvidia.com/gpu=all", "image": IMAGE, "command": ["nvidia-smi", "-L"],
            "ok": True, "failed_step": None, "deadline_hit": False, "deadline_s": 60.0,
            "error": "", "exit_code": 0, "output": LISTING, "image_missing": False,
            "cleanup": {"removed": ["sandbox"], "left": []}, "notes": [], "elapsed_s": 4.2}
    base.update(over)
    return base


def details(rec: Dict[str, Any], **extra: Any) -> Dict[str, Any]:
    out = {k: rec.get(k) for k in ("route", "mode", "image", "handler", "cdi_device",
                                   "failed_step", "exit_code", "elapsed_s")}
    out["cleanup_left"] = list(rec["cleanup"].get("left") or [])
    out.update(extra)
    return out


def run(rec: Any, path: str = "dra", snap: Any = "default", paths: Optional[List[str]] = None,
        skip_missing: Optional[bool] = None) -> Outcome:
    if snap == "default":
        snap = {"gpus": [{"index": 0, "uuid": U1}, {"index": 1, "uuid": U2}]}
    facts = {"workload": rec} if rec is not None else {}
    host = Host("/nonexistent", facts=StaticFacts(facts), gpus=StaticGpus(snap))
    wl: Dict[str, Any] = {"paths": paths if paths is not None else [path]}
    if skip_missing is not None:
        wl["skip_if_image_missing"] = skip_missing
    return GPU_WORKLOAD.run(host, ResolvedPolicy(load_policy(2), path, settings={"workload": wl}))


# -- no record ----------------------------------------------------------------------------------
@pytest.mark.parametrize("settings", [{}, {"workload": None}, {"workload": {}},
                                      {"workload": {"paths": None}},
                                      {"workload": {"paths": ["device-plugin"]}}])
def test_no_record_on_a_path_not_opted_in_is_not_applicable(settings):
    host = Host("/nonexistent", facts=StaticFacts({}), gpus=StaticGpus(None))
    out = GPU_WORKLOAD.run(host, ResolvedPolicy(load_policy(2), "dra", settings=settings))
    assert out == Outcome(Status.SKIP, "workload not enabled for the dra path (workload.paths)",
                          {}, skip=SKIP_NOT_APPLICABLE)


def test_no_record_on_an_opted_in_path_is_input_missing():
    out = run(None, "device-plugin", paths=["dra", "device-plugin"])
    assert out == Outcome(Status.SKIP, "the workload was not run for this host (a bare tree, or "
                          "`collect` without --with-workload)", {}, skip=SKIP_INPUT_MISSING)


@pytest.mark.parametrize("rec", [["not", "a", "mapping"], "text", {"route": "cri"},
                                 record(cleanup=["left"])])
def test_malformed_record_is_unknown(rec):
    assert run(rec) == Outcome(Status.UNKNOWN, "workload record malformed", {},
                               code="record-malformed")


@pytest.mark.parametrize("path, rec, want", [
    ("dra", record(mode="handler", path="device-plugin"), "(path device-plugin), not this "
                                                          "path's cdi route"),
    ("operator-gpucluster", record(mode="handler", path="device-plugin"),
     "(path device-plugin), not this path's cdi route"),
    ("device-plugin", record(), "(path dra), not this path's handler route"),
    ("operator-clusterpolicy", record(), "(path dra), not this path's handler route"),
])
def test_a_record_of_the_other_route_is_not_applicable(path, rec, want):
    out = run(rec, path)
    assert out == Outcome(Status.SKIP, f"the workload ran the {rec['mode']} route {want}", {},
                          skip=SKIP_NOT_APPLICABLE)


# -- the container listed every GPU ---------------------------------------------------------------
def test_all_gpus_listed_passes_with_every_detail():
    rec = record()
    assert run(rec) == Outcome(
        Status.PASS, f"cri route: a container with {IMAGE} saw all 2 GPU(s) NVML sees",
        details(rec, container_uuids=[U1, U2]))


def test_handler_route_on_a_device_plugin_path_passes():
    rec = record(route="native", mode="handler", path="device-plugin", handler="nvidia",
                 cdi_device=None)
    assert run(rec, "device-plugin") == Outcome(
        Status.PASS, f"native route: a container with {IMAGE} saw all 2 GPU(s) NVML sees",
        details(rec, container_uuids=[U1, U2]))


def test_objects_left_behind_warn():
    rec = record(cleanup={"removed": [], "left": ["container gpu-node-agent-x", "sandbox y"]})
    assert run(rec) == Outcome(
        Status.WARN, "cri route: passed, but left behind: container gpu-node-agent-x, sandbox y",
        details(rec, container_uuids=[U1, U2]), code="cleanup-incomplete")


def test_left_behind_list_is_cut_at_three_hundred_characters():
    left = [f"object-{i:03d}-" + "x" * 20 for i in range(20)]
    out = run(record(cleanup={"removed": [], "left": left}))
    assert out.summary == "cri route: passed, but left behind: " + ", ".join(left)[:300]


# -- mismatches -----------------------------------------------------------------------------------
@pytest.mark.parametrize("output, snap_uuids, seen, summary", [
    (f"GPU 0: X (UUID: {U1})\n", [U1, U2], [U1],
     f"listed 1 GPU(s), NVML 2; missing {U2}; unexpected none"),
    (LISTING, [U1], [U1, U2], f"listed 2 GPU(s), NVML 1; missing none; unexpected {U2}"),
    ("No devices were found\n", [], [], "listed 0 GPU(s), NVML 0; missing none; unexpected none"),
    (f"GPU 0: X (UUID: {U2})\n", [U1], [U2], f"listed 1 GPU(s), NVML 1; missing {U1}; "
                                             f"unexpected {U2}"),
])
def test_other_gpus_in_the_container_fail(output, snap_uuids, seen, summary):
    rec = record(output=output)
    snap = {"gpus": [{"index": i, "uuid": u} for i, u in enumerate(snap_uuids)]}
    assert run(rec, snap=snap) == Outcome(
        Status.FAIL, f"cri route: the container {summary}", details(rec, container_uuids=seen),
        code="output-mismatch")


def test_nvml_uuids_skip_entries_without_one():
    snap = {"gpus": [{"index": 0, "uuid": U2}, "junk", {"index": 1}, {"index": 2, "uuid": ""},
                     {"index": 3, "uuid": U1}]}
    rec = record(output=LISTING + LISTING)  # a UUID printed twice counts once
    assert run(rec, snap=snap) == Outcome(
        Status.PASS, f"cri route: a container with {IMAGE} saw all 2 GPU(s) NVML sees",
        details(rec, container_uuids=[U1, U2]))


@pytest.mark.parametrize("snap", [None, {"gpus": None}, {"gpus": "x"}, {"error": "no NVML"}])
def test_no_snapshot_is_input_missing(snap):
    rec = record()
    assert run(rec, snap=snap) == Outcome(
        Status.SKIP, "no NVML snapshot to hold the container's GPUs against",
        details(rec, container_uuids=[U1, U2]), skip=SKIP_INPUT_MISSING)


# -- failed steps -------------------------------------------------------------------------------
@pytest.mark.parametrize("step, code", [
    ("image", "image-failed"), ("sandbox", "sandbox-failed"), ("create", "create-failed"),
    ("start", "start-failed"), ("exit", "exit-nonzero"), ("runtime", "runtime-unreachable"),
])
def test_each_failed_step_fails_with_its_code_and_the_error(step, code):
    rec = record(failed_step=step, ok=False, error="boom: " + "e" * 400, output="  \n")
    assert run(rec) == Outcome(
        Status.FAIL, f"cri route: step `{step}` failed: " + ("boom: " + "e" * 400)[:300],
        details(rec), code=code)


def test_a_failed_step_shows_the_container_output_cut():
    out = "  nvidia-smi: " + "o" * 300 + "  \n"
    rec = record(failed_step="exit", ok=False, error="exit status 9", exit_code=9, output=out)
    assert run(rec) == Outcome(
        Status.FAIL, "cri route: step `exit` failed: exit status 9 (output: "
        + out.strip()[:200] + ")", details(rec), code="exit-nonzero")


def test_a_missing_client_is_unknown():
    rec = record(failed_step="tool", ok=False, error="crictl not found", output="")
    assert run(rec) == Outcome(Status.UNKNOWN, "cri route: step `tool` failed: crictl not found",
                               details(rec), code="tool-missing")


def test_an_unknown_step_is_a_malformed_record():
    assert run(record(failed_step="teleport", ok=False)) == Outcome(
        Status.UNKNOWN, "workload record names an unknown step 'teleport'", {},
        code="record-malformed")


def test_a_step_past_its_deadline_fails_as_deadline():
    rec = record(failed_step="sandbox", ok=False, deadline_hit=True, deadline_s=45.0,
                 error="context deadline exceeded", output="")
    assert run(rec) == Outcome(
        Status.FAIL, "cri route: step `sandbox` past its 45.0s deadline: context deadline "
        "exceeded", details(rec), code="deadline")


def test_a_missing_image_fails_or_skips_as_configured():
    rec = record(failed_step="image", ok=False, image_missing=True, error="not found",
                 output="")
    assert run(rec) == Outcome(
        Status.FAIL, f"image {IMAGE} not on the host and not pullable: not found", details(rec),
        code="image-missing")
    assert run(rec, skip_missing=False).code == "image-missing"
    assert run(rec, skip_missing=True) == Outcome(
        Status.SKIP, f"image {IMAGE} not on the host (workload.skip_if_image_missing)",
        details(rec), skip=SKIP_CONFIGURED)


def test_image_missing_only_counts_on_the_image_step():
    rec = record(failed_step="create", ok=False, image_missing=True, error="bad device",
                 output="")
    assert run(rec, skip_missing=True) == Outcome(
        Status.FAIL, "cri route: step `create` failed: bad device", details(rec),
        code="create-failed")


def test_a_policy_without_settings_reads_as_nothing_configured():
    bare: Any = SimpleNamespace(path="dra")  # no `settings`: no workload section at all
    none = Host("/nonexistent", facts=StaticFacts({}), gpus=StaticGpus(None))
    assert GPU_WORKLOAD.run(none, bare) == Outcome(
        Status.SKIP, "workload not enabled for the dra path (workload.paths)", {},
        skip=SKIP_NOT_APPLICABLE)
    rec = record(failed_step="image", ok=False, image_missing=True, error="not found", output="")
    host = Host("/nonexistent", facts=StaticFacts({"workload": rec}), gpus=StaticGpus(None))
    assert GPU_WORKLOAD.run(host, bare) == Outcome(
        Status.FAIL, f"image {IMAGE} not on the host and not pullable: not found", details(rec),
        code="image-missing")
