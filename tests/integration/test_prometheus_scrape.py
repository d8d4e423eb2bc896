"""A real Prometheus (Debian's binary, loopback, its own temp storage) scraping a real
`gpu-node-agent run`; series read back through Prometheus' HTTP API. Plain HTTP on a fixture
host with the simulated NVML; TLS + basic auth on a bundle; a wrong password refused."""
import os
import shutil
import subprocess
from pathlib import Path

import bcrypt
import pytest

from agent.version import version
from tests.components import component
from tests.integration.agentproc import BUNDLES, Prometheus, http_get, start_agent
from tests.unit.test_metrics_endpoint import make_cert

pytestmark = pytest.mark.integration
FAST = "run:\n  fast_interval: 1\n  slow_interval: 3\n  gpu_telemetry: true\n"


def _need(binary):
    """Debian's prometheus/promtool unpacked by .ci/setup.d/50-prometheus.sh."""
    return component(binary)


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    from tests.nvml_sim import simlib

    try:
        built = simlib.build(tmp_path_factory.mktemp("nvsim"))
    except simlib.SimUnavailable as exc:
        pytest.skip(f"simulated NVML unavailable: {exc}")
    return simlib, built


def _sim_env(sim, tmp_path, scenario):
    simlib, built = sim
    doc = simlib.resolve(scenario)
    path = simlib.write_scenario(doc, tmp_path / "scenario.json")
    env = simlib.worker_env(built, path)
    env.pop("LD_PRELOAD", None)
    return env, doc


def test_prometheus_scrapes_agent_on_simulated_8gpu_host(tmp_path, sim):
    _need("prometheus")
    env, doc = _sim_env(sim, tmp_path, "healthy-8xh100.json")
    agent, port = start_agent(tmp_path, ["--host-root", str(BUNDLES / "host-foundation-only" / "root"),
                                         "--nvml"], FAST, env=env)
    prom = None
    try:
        prom = Prometheus(tmp_path, [{"job_name": "gpu-node-agent",
                                      "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}])
        assert prom.wait_query('up{job="gpu-node-agent"} == 1')
        gpus = prom.wait_query("gpu_node_agent_gpus")
        assert gpus[0]["value"][1] == str(len(doc["gpus"])) == "8"
        info = prom.wait_query("gpu_node_agent_gpu_info")
        assert sorted(r["metric"]["uuid"] for r in info) == sorted(g["uuid"] for g in doc["gpus"])
        temp = prom.wait_query('gpu_node_agent_gpu_temperature_celsius{gpu="3"}')
        assert float(temp[0]["value"][1]) == doc["gpus"][3]["temperature_gpu_c"]
        build = prom.wait_query("gpu_node_agent_build_info")
        assert build[0]["metric"]["version"] == version()
        assert prom.wait_query('gpu_node_agent_nvml_up == 1')
        # every known check present, exactly one status each
        from checks.registry import ALL_CHECKS

        per_check = prom.wait_query("sum by (check) (gpu_node_agent_check_status)")
        assert {r["metric"]["check"] for r in per_check} == {c.id for c in ALL_CHECKS}
        assert all(r["value"][1] == "1" for r in per_check)
        # the gate per path is there for all four paths
        assert len(prom.wait_query("gpu_node_agent_gate_open")) == 4
    finally:
        if prom is not None:
            prom.stop()
        agent.stop()


def test_promtool_check_metrics_on_a_live_scrape(tmp_path, sim):
    _need("promtool")
    env, _ = _sim_env(sim, tmp_path, "healthy-8xh100.json")
    agent, port = start_agent(tmp_path, ["--host-root", str(BUNDLES / "host-foundation-only" / "root"),
                                         "--nvml"], FAST, env=env)
    try:
        body = http_get(f"http://127.0.0.1:{port}/metrics")
    finally:
        agent.stop()
    assert b"gpu_node_agent_gpu_info{" in body
    res = subprocess.run([component("promtool"), "check", "metrics"], input=body, capture_output=True,
                         timeout=60)
    assert res.returncode == 0 and not res.stdout.strip() and not res.stderr.strip(), res
    # the linter is not a rubber stamp: a counter without _total is reported
    bad = b"# HELP x_errors Errors.\n# TYPE x_errors counter\nx_errors 1\n"
    res = subprocess.run([component("promtool"), "check", "metrics"], input=bad, capture_output=True,
                         timeout=60)
    assert res.returncode != 0 or res.stdout.strip() or res.stderr.strip()


def test_tls_basic_auth_and_wrong_password(tmp_path):
    _need("prometheus")
    crt, key = make_cert(tmp_path)
    hashed = bcrypt.hashpw(b"right-pass", bcrypt.gensalt(10)).decode()
    web = tmp_path / "web.yml"
    web.write_text(f"tls_server_config:\n  cert_file: {crt.name}\n  key_file: {key.name}\n"
                   f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    agent, port = start_agent(tmp_path, ["--bundle", str(BUNDLES / "host-foundation-only")],
                              FAST + f"  web_config_file: {web}\n")
    prom = None
    try:
        target = {"targets": [f"127.0.0.1:{port}"]}
        tls = {"ca_file": str(crt)}
        prom = Prometheus(tmp_path, [
            {"job_name": "good", "scheme": "https", "tls_config": tls,
             "basic_auth": {"username": "prometheus", "password": "right-pass"},
             "static_configs": [target]},
            {"job_name": "bad", "scheme": "https", "tls_config": tls,
             "basic_auth": {"username": "prometheus", "password": "wrong-pass"},
             "static_configs": [target]},
            {"job_name": "plain", "scheme": "http", "static_configs": [target]},
        ])
        assert prom.wait_query('up{job="good"} == 1')
        series = prom.wait_query('gpu_node_agent_check_status{job="good",check="driver-loaded"}')
        assert {r["metric"]["status"] for r in series} == {"pass", "warn", "fail", "unknown", "skip"}
        assert prom.wait_query('up{job="bad"} == 0')
        assert prom.wait_query('up{job="plain"} == 0')
        assert not prom.query('gpu_node_agent_build_info{job=~"bad|plain"}')
        errors = {t["labels"]["job"]: t.get("lastError", "") for t in prom.targets()}
        assert "401" in errors["bad"], errors
        assert errors["good"] == ""
    finally:
        if prom is not None:
            prom.stop()
        agent.stop()
    assert "basic_auth=True" in agent.text() and "tls=True" in agent.text()


def test_promtool_rules(tmp_path):
    _need("promtool")
    rules = os.path.join(os.path.dirname(__file__), "..", "..", "prometheus")
    res = subprocess.run([component("promtool"), "check", "rules", f"{rules}/alerts.yml"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    tests = sorted(f for f in os.listdir(f"{rules}/tests") if f.endswith(".yml"))
    assert tests
    res = subprocess.run([component("promtool"), "test", "rules", *[f"{rules}/tests/{t}" for t in tests]],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "SUCCESS" in res.stdout, res.stdout + res.stderr
    # The rule tests can fail: shortening a `for:` or dropping the NaN guard is caught.
    for old, new in (("for: 15m", "for: 5m"), ("time_synced == 0", "time_synced != 1")):
        (tmp_path / "tests").mkdir(exist_ok=True)
        text = Path(rules, "alerts.yml").read_text()
        assert old in text
        (tmp_path / "alerts.yml").write_text(text.replace(old, new))
        shutil.copy(f"{rules}/tests/alerts_test.yml", tmp_path / "tests" / "alerts_test.yml")
        res = subprocess.run([component("promtool"), "test", "rules", str(tmp_path / "tests/alerts_test.yml")],
                             capture_output=True, text=True, timeout=120)
        assert res.returncode != 0, f"mutation {old!r} -> {new!r} not caught"
