"""MIG through the real pynvml: the NVML worker (agent.nvml.worker) and a bare pynvml script read
the simulated libnvidia-ml's MIG devices, GPU instances and profiles.

Expected values come from the scenario files (tests/nvml_sim/scenarios/mig-*.json: what the
library was told to report) and nvml.h's documented return codes, never from the snapshot
under test.
"""
import json
import subprocess
import sys

import pynvml  # its constants only: every NVML call runs in a child process
import pytest

from agent.engine import Engine
from agent.host.seam import Host
from checks.gpu.mig_geometry import MIG_GEOMETRY
from checks.gpu.mig_mode import MIG_MODE
from checks.nvml_responsive import NVML_RESPONSIVE
from checks.policy import ResolvedPolicy, load_policy
from tests.nvml_sim import simlib

pytestmark = pytest.mark.integration


def _profile_names(doc):
    """profile id -> name without "MIG ", from the scenario's profile table."""
    table = simlib.field(doc, 0, "mig_profiles")
    return {p["id"]: p["name"][len("MIG "):] for p in table}


@pytest.mark.parametrize("scenario", ["mig-enabled.json", "mig-mixed.json",
                                      "mig-no-instances.json"])
def test_the_worker_reads_every_mig_device_the_library_reports(nvml_sim, scenario):
    doc = nvml_sim.use(scenario)
    snap = nvml_sim.client().snapshot()
    assert snap["error"] is None
    assert nvml_sim.missing_symbols() == []  # pynvml resolved every MIG function it looked up
    names = _profile_names(doc)
    for i, gpu in enumerate(snap["gpus"]):
        assert gpu["errors"] == {}, gpu["errors"]
        if simlib.field(doc, i, "mig_current") != 1:
            assert gpu["mig"] == {"current": "disabled", "pending": "disabled"}
            continue
        own = doc["gpus"][i].get("mig_devices", [])
        assert gpu["mig"]["devices"] == [
            {"uuid": d["uuid"], "profile": names[d["profile_id"]], "gpu_instance_id": d["gi"],
             "compute_instance_id": d["ci"]} for d in own]


def test_the_h100_single_geometry_is_seven_1g_10gb_per_gpu(nvml_sim):
    nvml_sim.use("mig-enabled.json")
    snap = nvml_sim.client().snapshot()
    for gpu in snap["gpus"]:
        profiles = [d["profile"] for d in gpu["mig"]["devices"]]
        assert profiles == ["1g.10gb"] * 7
        assert [d["gpu_instance_id"] for d in gpu["mig"]["devices"]] == list(range(7, 14))
        assert all(d["uuid"].startswith("MIG-") for d in gpu["mig"]["devices"])


def test_a_failed_mig_device_read_is_recorded_and_leaves_the_mode(nvml_sim):
    nvml_sim.use("mig-devices-error.json")
    snap = nvml_sim.client().snapshot()
    gpu0 = snap["gpus"][0]
    assert gpu0["mig"] == {"current": "enabled", "pending": "enabled"}
    assert gpu0["errors"] == {"mig.devices": {"kind": "nvml_error", "message": "Unknown Error",
                                              "nvml_code": 999}}
    assert len(snap["gpus"][1]["mig"]["devices"]) == 7


# The library's answers as nvml.h documents them, asked through pynvml in a child process (the
# test process itself never loads libnvidia-ml, as the agent's never does).
PROBE = r"""
import json, pynvml
pynvml.nvmlInit()
out = {}
def code(fn, *args):
    try:
        fn(*args)
        return 0
    except pynvml.NVMLError as exc:
        return exc.value
mig_gpu, plain_gpu = pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlDeviceGetHandleByIndex(2)
out["max_on"] = pynvml.nvmlDeviceGetMaxMigDeviceCount(mig_gpu)
out["max_off"] = pynvml.nvmlDeviceGetMaxMigDeviceCount(plain_gpu)
out["handle_off"] = code(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, plain_gpu, 0)
out["handle_empty_slot"] = code(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, mig_gpu, 5)
out["handle_past_max"] = code(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, mig_gpu, 7)
out["gi_of_gpu_handle"] = code(pynvml.nvmlDeviceGetGpuInstanceId, mig_gpu)
out["gi_by_missing_id"] = code(pynvml.nvmlDeviceGetGpuInstanceById, mig_gpu, 99)
out["profile_off"] = code(pynvml.nvmlDeviceGetGpuInstanceProfileInfo, plain_gpu, 0)
out["profile_not_offered"] = code(pynvml.nvmlDeviceGetGpuInstanceProfileInfo, mig_gpu, 5)
out["profile_past_count"] = code(pynvml.nvmlDeviceGetGpuInstanceProfileInfo, mig_gpu, 0x12)
mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(mig_gpu, 1)
# nvidia-ml-py returns the c_uint itself here
out["is_mig"] = [pynvml.nvmlDeviceIsMigDeviceHandle(h).value for h in (mig, mig_gpu)]
parent = pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
out["parent_uuid"] = pynvml.nvmlDeviceGetUUID(parent)
gi = pynvml.nvmlGpuInstanceGetInfo(pynvml.nvmlDeviceGetGpuInstanceById(mig_gpu, 3))
out["gi3"] = [gi.id, gi.profileId, gi.placement.size]
info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(mig_gpu, 1)
out["profile1"] = [info.id, info.sliceCount, info.instanceCount, info.name]
print(json.dumps(out, default=lambda v: v.decode() if isinstance(v, bytes) else int(v)))
"""


def test_the_library_answers_the_mig_calls_as_nvml_h_says(nvml_sim, tmp_path):
    doc = nvml_sim.use("mig-mixed.json")
    res = subprocess.run([sys.executable, "-c", PROBE], env=nvml_sim.env(), capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["max_on"] == 7 and out["max_off"] == 0  # "zero if MIG is not ... enabled"
    assert out["handle_off"] == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert out["handle_empty_slot"] == pynvml.NVML_ERROR_NOT_FOUND  # GPU 0 has slots 0-3
    assert out["handle_past_max"] == pynvml.NVML_ERROR_INVALID_ARGUMENT
    assert out["gi_of_gpu_handle"] == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert out["gi_by_missing_id"] == pynvml.NVML_ERROR_NOT_FOUND
    assert out["profile_off"] == pynvml.NVML_ERROR_NOT_SUPPORTED
    # NVML_GPU_INSTANCE_PROFILE_8_SLICE (5): not an H100 profile; 0x12 = ..._PROFILE_COUNT.
    assert out["profile_not_offered"] == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert out["profile_past_count"] == pynvml.NVML_ERROR_INVALID_ARGUMENT
    assert out["is_mig"] == [1, 0]
    assert out["parent_uuid"] == simlib.field(doc, 0, "uuid")
    # GPU 0's GPU instance 3 is its 2g.20gb (profile id 14, 2 slices) in mig-mixed.json.
    assert out["gi3"] == [3, 14, 2]
    assert out["profile1"] == [14, 2, 3, "MIG 2g.20gb"]


def test_the_mig_checks_judge_what_the_library_reports(nvml_sim, tmp_path):
    nvml_sim.use("mig-no-instances.json")
    (tmp_path / "root").mkdir()
    host = Host(tmp_path / "root", gpus=nvml_sim.source())
    settings = {"gpu": {"mig_strategy": "single", "mig_geometry": {"0": ["7g.80gb"]}}}
    engine = Engine([NVML_RESPONSIVE, MIG_MODE, MIG_GEOMETRY])
    by_id = {r.id: r for r in engine.run(host, ResolvedPolicy(load_policy(2), "dra",
                                                              settings=settings))}
    assert (by_id["mig-mode"].status.value, by_id["mig-mode"].code) == ("fail",
                                                                          "mig-no-instances")
    assert (by_id["mig-geometry"].status.value, by_id["mig-geometry"].code) == (
        "fail", "mig-geometry-unmet")
    assert by_id["mig-geometry"].summary.endswith(
        "MIG geometry is no GPU instance; gpu.mig_geometry[0] wants 1 x 7g.80gb")
    by_id = {r.id: r for r in engine.run(host, ResolvedPolicy(load_policy(1), "dra",
                                                              settings=settings))}
    assert by_id["mig-mode"].status.value == "pass"
    assert by_id["mig-geometry"].status.value == "skip"

