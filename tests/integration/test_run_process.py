"""`gpu-node-agent run` as a process: SIGHUP reloads (a bad file keeps the old config, one log
line), SIGTERM stops within seconds, the textfile, exit-for-restart when the NVIDIA driver
appears after start, and a wedged NVML (simulated) that never stalls the endpoint."""
import base64
import os
import shutil
import signal
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.components import component
from tests.integration.agentproc import (
    BUNDLES,
    Proc,
    descendants,
    free_port,
    http_get,
    start_agent,
    wait_for,
)

pytestmark = pytest.mark.integration
HEALTHY = str(BUNDLES / "host-foundation-only")


def _scrape(port):
    out = {}
    for fam in text_string_to_metric_families(http_get(f"http://127.0.0.1:{port}/metrics").decode()):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def _one(parsed, name, **labels):
    rows = [v for lab, v in parsed.get(name, []) if all(lab.get(k) == w for k, w in labels.items())]
    return rows[0] if len(rows) == 1 else None


def test_sighup_reload_keeps_old_config_when_invalid_and_sigterm_is_quick(tmp_path):
    agent, port = start_agent(tmp_path, ["--bundle", HEALTHY],
                              "allocation_path: dra\nrun:\n  fast_interval: 0.5\n")
    try:
        cfg = tmp_path / "agent.yaml"
        assert _one(_scrape(port), "gpu_node_agent_allocation_path_info", path="dra") == 1
        cfg.write_text("allocation_path: dra\nrun:\n  fast_interval: 0.5\n  bogus_key: 1\n")
        agent.signal(signal.SIGHUP)
        wait_for(lambda: "config reload failed" in agent.text(), 10, "the reload error line")
        time.sleep(1.0)
        lines = [ln for ln in agent.text().splitlines() if "config reload failed" in ln]
        assert len(lines) == 1 and "level=error" in lines[0] and "bogus_key" in lines[0]
        parsed = _scrape(port)
        assert _one(parsed, "gpu_node_agent_config_last_reload_successful") == 0
        assert _one(parsed, "gpu_node_agent_allocation_path_info", path="dra") == 1
        assert agent.popen.poll() is None
        cfg.write_text("allocation_path: device-plugin\nrun:\n  fast_interval: 0.5\n")
        agent.signal(signal.SIGHUP)
        wait_for(lambda: _one(_scrape(port), "gpu_node_agent_allocation_path_info",
                              path="device-plugin") == 1, 10, "the new path served")
        assert _one(_scrape(port), "gpu_node_agent_config_last_reload_successful") == 1
        started = time.monotonic()
        agent.signal(signal.SIGTERM)
        rc = agent.wait(10)
        took = time.monotonic() - started
    finally:
        agent.stop()
    assert rc == 0 and took < 5, (rc, took)
    assert "level=info msg=stopping" in agent.text()
    for line in agent.text().splitlines():  # structured, one record per line
        assert line.startswith("ts=") and " level=" in line and " msg=" in line, line


def test_textfile_is_written_atomically_and_matches_the_endpoint(tmp_path):
    out = tmp_path / "textfile"
    out.mkdir()
    agent, port = start_agent(tmp_path, ["--bundle", HEALTHY],
                              f"run:\n  fast_interval: 600\n  textfile_dir: {out}\n")
    try:
        body = http_get(f"http://127.0.0.1:{port}/metrics")
        files = sorted(p.name for p in out.iterdir())
        text = (out / "gpu_node_agent.prom").read_bytes()
    finally:
        agent.stop()
    assert files == ["gpu_node_agent.prom"] and text == body
    samples = [s for f in text_string_to_metric_families(text.decode()) for s in f.samples]
    assert samples and all(s.timestamp is None for s in samples)
    # the real consumer: node_exporter's textfile collector reads it without an error
    exe = component("node_exporter")  # Debian's, unpacked by .ci/setup.d/50-prometheus.sh
    nport = free_port()
    node = Proc([exe, f"--web.listen-address=127.0.0.1:{nport}", "--collector.disable-defaults",
                 "--collector.textfile", f"--collector.textfile.directory={out}"],
                tmp_path / "node.log")
    try:
        exported = wait_for(lambda: _scrape(nport), 30, "node_exporter")
    finally:
        node.stop()
    assert _one(exported, "node_textfile_scrape_error") == 0
    assert _one(exported, "gpu_node_agent_check_status", check="driver-loaded", status="pass") == 1


def test_driver_loaded_after_start_exits_for_a_restart(tmp_path):
    root = tmp_path / "root"
    shutil.copytree(BUNDLES / "host-no-driver" / "root", root, symlinks=True)
    (root / "proc").mkdir(exist_ok=True)
    devices = root / "proc" / "devices"
    devices.write_text("Character devices:\n  1 mem\n  4 tty\n\nBlock devices:\n  8 sd\n")
    agent, port = start_agent(tmp_path, ["--host-root", str(root)], "run:\n  fast_interval: 1\n")
    try:
        time.sleep(1.5)
        assert agent.popen.poll() is None  # nothing changed: keeps running
        devices.write_text("Character devices:\n  1 mem\n195 nvidia\n195 nvidiactl\n"
                           "508 nvidia-uvm\n\nBlock devices:\n  8 sd\n")
        rc = agent.wait(15)
    finally:
        agent.stop()
    assert rc == 75, agent.text()[-1500:]
    assert "NVIDIA driver loaded after start" in agent.text() and "195:nvidia" in agent.text()


def _sim_env(tmp_path, scenario_name):
    """The agent's environment for the simulated 8-GPU NVML under one scenario (no LD_PRELOAD:
    the worker loads the library by path)."""
    from tests.nvml_sim import simlib

    try:
        built = simlib.build(tmp_path / "nvsim")
    except simlib.SimUnavailable as exc:
        pytest.skip(f"simulated NVML unavailable: {exc}")
    scenario = simlib.write_scenario(simlib.resolve(scenario_name), tmp_path / "scn.json")
    env = simlib.worker_env(built, scenario)
    env.pop("LD_PRELOAD", None)
    return env


def test_wedged_nvml_never_stalls_the_endpoint(tmp_path):
    env = _sim_env(tmp_path, "hang-handle.json")
    config = ("run:\n  fast_interval: 1\ngpu:\n  nvml_deadline_s: 1\n"
              "  nvml_first_deadline_s: 2\n")
    agent, port = start_agent(tmp_path, ["--host-root", str(BUNDLES / "host-foundation-only" / "root"),
                                         "--nvml"], config, env=env, wait_ready=False)
    try:
        # from the start and throughout the NVML hang: answers, quickly
        worst = 0.0
        end = time.monotonic() + 8
        parsed = {}
        while time.monotonic() < end:
            t0 = time.monotonic()
            try:
                parsed = _scrape(port)
            except OSError:
                time.sleep(0.1)  # not listening yet
                continue
            worst = max(worst, time.monotonic() - t0)
            time.sleep(0.2)
        assert parsed and worst < 1.0, worst  # NVML blocks for 60 s per call
        assert _one(parsed, "gpu_node_agent_nvml_up") == 0
        assert (_one(parsed, "gpu_node_agent_nvml_timeouts_total") or 0) >= 1
        assert _one(parsed, "gpu_node_agent_check_status", check="nvml-responsive",
                    status="pass") == 0
        assert agent.popen.poll() is None
        started = time.monotonic()
        agent.signal(signal.SIGTERM)
        rc = agent.wait(10)
        assert rc == 0 and time.monotonic() - started < 5
    finally:
        agent.stop()


def test_sighup_applies_a_new_web_config_on_the_same_port(tmp_path):
    import urllib.error

    import bcrypt

    agent, port = start_agent(tmp_path, ["--bundle", HEALTHY], "run:\n  fast_interval: 600\n")
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        assert http_get(url)  # plain, no auth
        web = tmp_path / "web.yml"
        hashed = bcrypt.hashpw(b"pw", bcrypt.gensalt(4)).decode()
        web.write_text(f"basic_auth_users:\n  prom: '{hashed}'\n")
        (tmp_path / "agent.yaml").write_text(
            f"run:\n  fast_interval: 600\n  web_config_file: {web}\n")
        agent.signal(signal.SIGHUP)

        def refused():
            try:
                http_get(url)
            except urllib.error.HTTPError as exc:
                return exc.code == 401
            return False

        wait_for(refused, 10, "basic auth after SIGHUP")
        token = "Basic " + base64.b64encode(b"prom:pw").decode()
        assert http_get(url, headers={"Authorization": token})
        web.write_text("basic_auth_users:\n  prom: not-a-hash\n")  # invalid: keep the old one
        agent.signal(signal.SIGHUP)
        wait_for(lambda: "config reload failed" in agent.text(), 10, "the reload error")
        assert http_get(url, headers={"Authorization": token})
        assert refused()
    finally:
        agent.stop()


def test_live_run_holds_nvml_in_one_worker_that_also_delivers_xid_events(tmp_path):
    """A live `run` (kernel log, XID monitor, NVML) on the simulated 8-GPU host whose NVML
    delivers XID 48 on GPU 2 and XID 94 on GPU 5 (scenarios/xid-events.json): the agent has one
    NVML child, the worker with --events, and the XIDs reach the metrics through it. (Until the
    event wait moved into the snapshot worker, `run` had two NVML children.)"""
    if not os.access("/dev/kmsg", os.R_OK):
        pytest.skip("no readable /dev/kmsg: a live run has no XID monitor here")
    env = _sim_env(tmp_path, "xid-events.json")
    config = (f"state_dir: {tmp_path / 'state'}\nrun:\n  fast_interval: 1\n"
              "kube:\n  enabled: false\n")
    agent, port = start_agent(tmp_path, [], config, env=env)
    try:
        def xids():
            return {(lab.get("gpu"), lab.get("xid")): v for lab, v in
                    _scrape(port).get("gpu_node_agent_gpu_xid_errors_total", [])}

        wait_for(lambda: xids().get(("2", "48")) == 1 and xids().get(("5", "94")) == 1, 30,
                 "the NVML XID events in the metrics")
        children = descendants(agent.popen.pid)
        workers = [cmd for cmd in children.values() if "agent.nvml.worker" in cmd]
        assert len(workers) == 1 and workers[0].rstrip().endswith("--events"), children
        # Nothing else of the agent's own (a check's command may come and go meanwhile).
        assert [c for c in children.values() if "-m agent" in c] == workers, children
    finally:
        agent.stop()
