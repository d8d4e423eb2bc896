"""The NVML worker process and its client: deadlines, kill by PID, respawn with backoff,
stuck workers, maintenance mode, scenario changes under a running worker, and the
`gpu-node-agent check` hang test, all against the real pynvml and the simulated library."""
import ctypes.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import List

import pytest

from agent.nvml.client import NvmlClient

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A reaped child is gone; an unreaped zombie is dead for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def workers_using(scenario: Path) -> List[int]:
    """PIDs of NVML workers whose environment names this test's scenario file."""
    found = []
    needle = f"NVML_SIM_SCENARIO={scenario}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                env = fh.read().split(b"\0")
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmd = fh.read()
        except OSError:
            continue
        if needle in env and b"agent.nvml.worker" in cmd and alive(int(entry)):
            found.append(int(entry))
    return found


def test_one_worker_answers_many_snapshots_and_sees_a_changed_scenario(nvml_sim):
    nvml_sim.use("healthy-8xh100.json")
    client = nvml_sim.client()
    first = client.snapshot()
    assert first["gpus"][2]["ecc"]["volatile"]["uncorrected"] == 0
    doc = nvml_sim.use("ecc-uncorrectable.json")
    second = client.snapshot()
    assert second["worker"]["pid"] == first["worker"]["pid"]  # the same process
    assert second["gpus"][2]["ecc"]["volatile"]["uncorrected"] == \
        doc["gpus"][2]["ecc_volatile_uncorrected"]
    assert client.stats["spawns"] == 1 and client.stats["timeouts"] == 0


def test_deadline_kills_the_worker_by_pid_and_respawns_after_backoff(nvml_sim):
    nvml_sim.use("hang-handle.json")
    client = nvml_sim.client(deadline_s=1.0, first_deadline_s=1.5, backoff_initial_s=0.5)
    started = time.monotonic()
    snap = client.snapshot()
    took = time.monotonic() - started
    assert snap["error"]["kind"] == "timeout"
    assert "driver unresponsive" in snap["error"]["message"]
    assert 1.5 <= took < 1.5 + 3.0  # the deadline plus the reap wait, not the 60 s hang
    assert workers_using(nvml_sim.scenario_path) == []
    assert client.stats["timeouts"] == 1 and client.stats["stuck_workers"] == 0
    # Within the backoff no new worker starts.
    again = client.snapshot()
    assert again["error"]["kind"] == "timeout" and "backoff" in again["error"]["message"]
    assert client.stats["spawns"] == 1
    nvml_sim.use("healthy-8xh100.json")
    time.sleep(0.6)
    healed = client.snapshot()
    assert healed["error"] is None and len(healed["gpus"]) == 8
    assert client.stats["spawns"] == 2 and client.stats["respawns"] == 1


class _KillThatDoesNotTake(NvmlClient):
    """Signal 0 delivers nothing: the worker outlives its kill, as one in uninterruptible
    sleep inside the driver outlives SIGKILL."""

    KILL_SIGNAL = 0


def test_never_respawns_behind_a_stuck_worker_and_counts_it(nvml_sim):
    nvml_sim.use("hang-handle.json")
    client = _KillThatDoesNotTake(env=nvml_sim.env(), deadline_s=1.0, first_deadline_s=1.0,
                                  backoff_initial_s=0.1)
    nvml_sim.clients.append(client)
    snap = client.snapshot()
    assert snap["error"]["kind"] == "timeout"
    stuck = client.stuck_pid
    assert stuck is not None and alive(stuck)
    assert client.stats["stuck_workers"] == 1
    time.sleep(0.2)
    blocked = client.snapshot()
    assert blocked["error"]["kind"] == "worker_stuck" and str(stuck) in blocked["error"]["message"]
    assert client.stats["spawns"] == 1  # nothing started behind it
    assert workers_using(nvml_sim.scenario_path) == [stuck]
    os.kill(stuck, 9)  # the stuck one finally goes away (the driver let go)
    deadline = time.monotonic() + 5
    while alive(stuck) and time.monotonic() < deadline:
        time.sleep(0.05)
    nvml_sim.use("healthy-8xh100.json")
    assert client.snapshot()["error"] is None
    assert client.stats["spawns"] == 2


def test_maintenance_releases_nvml_and_resume_starts_a_fresh_worker(nvml_sim):
    nvml_sim.use("healthy-8xh100.json")
    client = NvmlClient(env=nvml_sim.env(call_log=True), first_deadline_s=20)
    nvml_sim.clients.append(client)
    pid = client.snapshot()["worker"]["pid"]
    client.maintenance(True)
    assert not alive(pid) and client.worker_pid is None
    assert "nvmlShutdown" in nvml_sim.calls()
    held = client.snapshot()
    assert held["error"]["kind"] == "maintenance" and client.worker_pid is None
    client.maintenance(False)
    back = client.snapshot()
    assert back["error"] is None and back["worker"]["pid"] != pid


def test_maintenance_flag_file(nvml_sim, tmp_path):
    nvml_sim.use("healthy-8xh100.json")
    flag = tmp_path / "nvml-maintenance"
    client = nvml_sim.client(maintenance_flag=str(flag))
    assert client.snapshot()["error"] is None
    flag.write_text("")
    assert client.snapshot()["error"]["kind"] == "maintenance" and client.worker_pid is None
    flag.unlink()
    assert client.snapshot()["error"] is None


def test_worker_maintenance_op_holds_nothing_until_resumed(nvml_sim):
    """The worker-level protocol (for a caller that keeps the process): nvmlShutdown on
    "maintenance on", snapshots refused until "off"."""
    nvml_sim.use("healthy-8xh100.json")
    env = nvml_sim.env(call_log=True)
    lines = "\n".join(json.dumps(r) for r in [
        {"id": 1, "op": "snapshot"}, {"id": 2, "op": "maintenance", "on": True},
        {"id": 3, "op": "snapshot"}, {"id": 4, "op": "maintenance", "on": False},
        {"id": 5, "op": "snapshot"}]) + "\n"
    out = subprocess.run([sys.executable, "-m", "agent.nvml.worker"], input=lines, env=env,
                         capture_output=True, text=True, timeout=60, cwd=REPO, check=True)
    replies = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r["id"] for r in replies] == [1, 2, 3, 4, 5]
    assert replies[0]["snapshot"]["error"] is None
    assert replies[2]["snapshot"]["error"]["kind"] == "maintenance"
    assert replies[4]["snapshot"]["error"] is None
    calls = nvml_sim.calls()
    shutdown_at = calls.index("nvmlShutdown")
    assert calls.count("nvmlInitWithFlags") == 2 and calls.index("nvmlInitWithFlags", 1) > shutdown_at


def _cli(args, env, timeout=120):
    return subprocess.run([sys.executable, "-m", "agent.cli"] + args, env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


def test_check_finishes_within_the_nvml_deadline_when_nvml_hangs(nvml_sim, tmp_path):
    nvml_sim.use("hang-handle.json")  # nvmlDeviceGetHandleByIndex_v2 blocks for 60 s
    deadline = 4.0
    config = tmp_path / "config.yaml"
    config.write_text(f"gpu:\n  nvml_first_deadline_s: {deadline}\n  nvml_deadline_s: {deadline}\n"
                      f"  maintenance_flag: {tmp_path / 'no-flag'}\n")
    started = time.monotonic()
    res = _cli(["check", "--config", str(config), "--format", "json"], nvml_sim.env())
    took = time.monotonic() - started
    assert res.returncode == 1, res.stderr
    assert took < deadline + 5.0, f"check took {took:.1f}s"
    checks = {c["id"]: c for c in json.loads(res.stdout)["checks"]}
    assert checks["nvml-responsive"]["status"] == "fail"
    assert "driver unresponsive" in checks["nvml-responsive"]["summary"]
    for cid in ("gpu-count", "gpu-ecc", "gpu-row-remap", "mig-mode", "gpu-thermal"):
        assert checks[cid]["summary"] == "needs nvml-responsive (fail)"
    # Every check that does not need NVML still ran to its own verdict.
    non_gpu = [c for c in checks.values() if "nvml-responsive" not in c["summary"]
               and c["id"] != "nvml-responsive"]
    assert {"os-supported", "driver-loaded", "time-sync"} <= {c["id"] for c in non_gpu}
    assert all("did not finish" not in c["summary"] for c in non_gpu)
    assert workers_using(nvml_sim.scenario_path) == []


def test_check_on_this_machine_without_a_driver_fails_nvml_responsive_for_the_reason(tmp_path):
    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("this machine has a real libnvidia-ml; the no-driver case cannot be shown")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LD_", "NVML_SIM_"))}
    config = tmp_path / "config.yaml"
    config.write_text(f"gpu:\n  maintenance_flag: {tmp_path / 'no-flag'}\n")
    res = _cli(["check", "--config", str(config), "--format", "json",
                "--only", "nvml-responsive,gpu-ecc,gpu-count"], env)
    assert res.returncode == 1, res.stderr
    checks = {c["id"]: c for c in json.loads(res.stdout)["checks"]}
    assert checks["nvml-responsive"]["status"] == "fail"
    assert checks["nvml-responsive"]["summary"].startswith("libnvidia-ml.so.1 not found")
    assert checks["nvml-responsive"]["details"]["kind"] == "library_not_found"
    assert checks["gpu-ecc"]["summary"] == "needs nvml-responsive (fail)"
