"""Fault matrix, NVML rows: a hanging driver, no libnvidia-ml at all, and a GPU lost while
`run` is running. The agent is a real process; NVML is the simulated libnvidia-ml
(tests/nvml_sim, compiled against NVIDIA's nvml.h) loaded by the real pynvml in the agent's
NVML worker. The scenario file is rewritten under the running agent for the GPU-loss row."""
import contextlib
import signal

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.agentproc import BUNDLES, http_get, start_agent, wait_for

pytestmark = pytest.mark.integration  # needs gcc and NVIDIA's nvml.h (.ci/setup.d/20-nvml.sh)
ROOT = str(BUNDLES / "host-foundation-only" / "root")
CONFIG = "run:\n  fast_interval: 0.5\ngpu:\n  nvml_deadline_s: 1\n  nvml_first_deadline_s: 3\n"


def _sim(tmp_path, scenario):
    from tests.nvml_sim import simlib

    try:
        built = simlib.build(tmp_path / "nvsim")
    except simlib.SimUnavailable as exc:
        pytest.skip(f"simulated NVML unavailable: {exc}")
    path = simlib.write_scenario(simlib.resolve(scenario), tmp_path / "scn.json")
    env = simlib.worker_env(built, path)
    env.pop("LD_PRELOAD", None)
    return simlib, env, path


def _metrics(port):
    out = {}
    body = http_get(f"http://127.0.0.1:{port}/metrics", timeout=10).decode()
    for fam in text_string_to_metric_families(body):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def _status(parsed, check):
    rows = [lab["status"] for lab, v in parsed.get("gpu_node_agent_check_status", [])
            if lab.get("check") == check and v == 1]
    return rows[0] if len(rows) == 1 else None


def _scrapes_answered(port, n=10):
    answered = 0
    for _ in range(n):
        with contextlib.suppress(OSError):
            answered += bool(_metrics(port))
    return answered


def test_nvml_hang_never_stalls_the_endpoint_or_the_process(tmp_path):
    """Row "NVML hang": every NVML call blocks for 60 s; the endpoint answers every scrape,
    nvml_up is 0, nvml-responsive is not pass, SIGTERM still exits 0."""
    _, env, _ = _sim(tmp_path, "hang-handle.json")
    agent, port = start_agent(tmp_path, ["--host-root", ROOT, "--nvml"], CONFIG, env=env)
    try:
        wait_for(lambda: _status(_metrics(port), "nvml-responsive") in ("fail", "unknown"),
                 60, "nvml-responsive to give up on the hang")
        assert _scrapes_answered(port) == 10
        parsed = _metrics(port)
        assert parsed["gpu_node_agent_nvml_up"][0][1] == 0
        agent.signal(signal.SIGTERM)
        assert agent.wait(15) == 0
    finally:
        agent.stop()


def test_nvml_library_missing_is_a_verdict_not_a_crash(tmp_path):
    """Row "library missing": no libnvidia-ml.so.1 anywhere; nvml-responsive fails or is
    unknown, the GPU checks do not pass, the process serves and stays up."""
    from tests.nvml_sim import simlib

    env = simlib.worker_env(None, None)
    agent, port = start_agent(tmp_path, ["--host-root", ROOT, "--nvml"], CONFIG, env=env)
    try:
        parsed = wait_for(lambda: (lambda p: p if _status(p, "nvml-responsive") else None)(
            _metrics(port)), 60, "a verdict on NVML")
        assert _status(parsed, "nvml-responsive") in ("fail", "unknown")
        assert parsed["gpu_node_agent_nvml_up"][0][1] == 0
        assert _scrapes_answered(port) == 10 and agent.popen.poll() is None
    finally:
        agent.stop()


def test_gpu_lost_during_run_fails_gpu_count_and_the_agent_goes_on(tmp_path):
    """Row "GPU lost during run": 8 healthy H100s, then GPU 3 returns GPU_IS_LOST to every
    call (scenario rewritten under the running agent): gpu-count fails naming GPU 3, the
    endpoint answers, cycles continue."""
    simlib, env, path = _sim(tmp_path, "healthy-8xh100.json")
    agent, port = start_agent(tmp_path, ["--host-root", ROOT, "--nvml"], CONFIG, env=env)
    try:
        wait_for(lambda: _metrics(port)["gpu_node_agent_nvml_up"][0][1] == 1, 60, "NVML up")
        before = _status(_metrics(port), "gpu-count")
        simlib.write_scenario(simlib.resolve("gpu-lost.json"), path)
        wait_for(lambda: _status(_metrics(port), "gpu-count") == "fail", 60, "gpu-count fail")
        assert before != "fail"
        assert _scrapes_answered(port) == 10 and agent.popen.poll() is None
        agent.signal(signal.SIGTERM)
        assert agent.wait(15) == 0
    finally:
        agent.stop()
