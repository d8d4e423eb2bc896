"""Fault matrix, process rows: bad config at start and on reload (a malformed file, a 100 MB
file), a SIGHUP burst, SIGKILL and restart, a worker thread that dies once and one that keeps
dying. `gpu-node-agent run` runs as a real process on a fixture bundle or tree, except for the
thread-death rows, which need a fault injected into the scheduler itself."""
import shutil
import signal
import threading
import time

from prometheus_client.parser import text_string_to_metric_families

from agent.daemon.process import EXIT_WORKER_DIED
from agent.daemon.service import Daemon
from agent.model import passed
from tests.conftest import run_cli
from tests.integration.agentproc import BUNDLES, http_get, start_agent, wait_for
from tests.reliability.helpers import HEALTHY_ROOT, Running, check, make_daemon

HEALTHY = str(BUNDLES / "host-foundation-only")


def _metrics(port):
    out = {}
    body = http_get(f"http://127.0.0.1:{port}/metrics").decode()
    for fam in text_string_to_metric_families(body):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def _one(parsed, name, **labels):
    rows = [v for lab, v in parsed.get(name, []) if all(lab.get(k) == w for k, w in labels.items())]
    assert len(rows) == 1, (name, labels, parsed.get(name))
    return rows[0]


def _peak_rss_kib(pid):
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM")


def test_bad_config_at_start_is_exit_2_with_one_line(tmp_path):
    """Row "bad config at start": exit 2, one line naming the file and the field."""
    cfg = tmp_path / "agent.yaml"
    cfg.write_text("run:\n  fast_interval: -1\n")
    result = run_cli(["run", "--config", str(cfg), "--bundle", HEALTHY,
                      "--listen-address", "127.0.0.1:0"])
    assert result.rc == 2
    lines = [line for line in result.err.splitlines() if line.strip()]
    assert len(lines) == 1 and str(cfg) in lines[0] and "run.fast_interval" in lines[0]


def test_bad_config_on_reload_keeps_the_old_one_and_a_100_mb_file_is_never_read(tmp_path):
    """Row "bad config on reload": a malformed file, then a 100 MB one: each reload fails with
    one log line, the previous config stays in force (reload metric 0, then 1 after a good
    file), and the agent's peak RSS stays under the unit's MemoryMax=128M."""
    agent, port = start_agent(tmp_path, ["--bundle", HEALTHY], "run:\n  fast_interval: 600\n")
    cfg = tmp_path / "agent.yaml"
    try:
        cfg.write_text("run: [unclosed\n")
        agent.signal(signal.SIGHUP)
        wait_for(lambda: agent.text().count("config reload failed") == 1, 20, "reload failure")
        # the exposition is re-rendered by the cycle the reload triggers
        wait_for(lambda: _one(_metrics(port), "gpu_node_agent_config_last_reload_successful")
                 == 0, 20, "reload metric 0")
        with open(cfg, "wb") as fh:  # 100 MB of a valid-looking YAML comment
            chunk = b"# " + b"x" * (1024 * 1024 - 3) + b"\n"
            for _ in range(100):
                fh.write(chunk)
        agent.signal(signal.SIGHUP)
        wait_for(lambda: agent.text().count("config reload failed") == 2, 30, "second failure")
        assert "cap" in agent.text().splitlines()[-1] or "cap" in agent.text()
        assert _peak_rss_kib(agent.pid) < 128 * 1024
        cfg.write_text("run:\n  fast_interval: 600\n")
        agent.signal(signal.SIGHUP)
        wait_for(lambda: "config reloaded" in agent.text(), 20, "good reload")
        wait_for(lambda: _one(_metrics(port), "gpu_node_agent_config_last_reload_successful")
                 == 1, 20, "reload metric back to 1")
        assert agent.popen.poll() is None
    finally:
        agent.stop()


def test_sighup_burst_coalesces_and_sigterm_is_still_honoured(tmp_path):
    """Row "SIGHUP burst": 3,000 back-to-back SIGHUPs: no RecursionError, no traceback, far
    fewer reloads than signals (they coalesce), the endpoint answers, SIGTERM exits 0."""
    agent, port = start_agent(tmp_path, ["--bundle", HEALTHY], "run:\n  fast_interval: 600\n")
    try:
        for _ in range(3000):
            agent.signal(signal.SIGHUP)
        wait_for(lambda: "config reloaded" in agent.text(), 20, "a reload")
        time.sleep(1.0)  # let any queued reload finish before counting
        assert http_get(f"http://127.0.0.1:{port}/metrics")
        text = agent.text()
        assert "RecursionError" not in text and "Traceback" not in text
        reloads = text.count("config reloaded")
        assert 1 <= reloads < 300, reloads
        agent.signal(signal.SIGTERM)
        assert agent.wait(15) == 0, agent.text()[-1500:]
    finally:
        agent.stop()


def test_sigkill_then_restart_on_the_same_port_with_an_intact_textfile(tmp_path):
    """Row "SIGKILL restart": killed mid-run (cycles every 0.2 s, textfile written each
    cycle), the textfile is whole (atomic rename), and a new agent binds the same port at
    once and serves."""
    textfiles = tmp_path / "textfile"
    textfiles.mkdir()
    config = f"run:\n  fast_interval: 0.2\n  textfile_dir: {textfiles}\n"
    agent, port = start_agent(tmp_path, ["--bundle", HEALTHY], config)
    try:
        time.sleep(1.5)  # several cycles, each rewriting the textfile
        agent.signal(signal.SIGKILL)
        assert agent.wait(10) == -signal.SIGKILL
    finally:
        agent.stop()
    prom = (textfiles / "gpu_node_agent.prom").read_text()
    assert prom.endswith("\n") and "gpu_node_agent_gate_open" in prom
    list(text_string_to_metric_families(prom))  # parses: never half a file
    again, port2 = start_agent(tmp_path, ["--bundle", HEALTHY], config, port=port, name="again")
    try:
        assert port2 == port
        assert _one(_metrics(port), "gpu_node_agent_gate_open", path="dra") in (0.0, 1.0)
    finally:
        again.stop()


def test_a_non_utf8_byte_in_a_host_file_does_not_stop_the_scheduler(tmp_path):
    """Row "worker thread dies (host file)": one byte that is not UTF-8 in /proc/devices used
    to kill the scheduler thread while the endpoint kept serving; cycles must go on."""
    root = tmp_path / "root"
    shutil.copytree(HEALTHY_ROOT, root, symlinks=True)
    devices = root / "proc" / "devices"
    devices.write_bytes(b"Character devices:\n  1 mem\n195 nvidia\xff\n\nBlock devices:\n")
    agent, port = start_agent(tmp_path, ["--host-root", str(root)],
                              "run:\n  fast_interval: 0.3\n")
    try:
        first = _one(_metrics(port), "gpu_node_agent_last_success_timestamp_seconds")
        wait_for(lambda: _one(_metrics(port), "gpu_node_agent_last_success_timestamp_seconds")
                 > first, 20, "a later cycle")
        assert "worker thread died" not in agent.text()
    finally:
        agent.stop()


class _Dies(Daemon):
    """The scheduler raises outside any check ``deaths`` times (then behaves)."""

    deaths = 0

    def _driver_appeared(self):
        if self.deaths != 0:
            self.deaths -= 1
            raise RuntimeError("injected scheduler fault")
        return super()._driver_appeared()


def test_a_dead_scheduler_thread_is_restarted_and_cycles_resume(tmp_path):
    """Row "worker thread dies": the main loop dies twice; the supervisor restarts it with
    backoff and cycles resume (the report is rebuilt after the deaths)."""
    d = make_daemon([check("fine", lambda h, p: passed("ok"))], restart_backoff_s=0.05,
                    daemon_class=_Dies)
    d.deaths = 2
    with Running(d):
        wait_for(lambda: d.deaths == 0 and d.report is not None, 20, "two deaths, then a cycle")
        workers = {w.name: w for w in d._workers}
        assert len(workers["main-loop"].deaths) == 2
        seen = d.last_success
        wait_for(lambda: d.last_success != seen, 10, "another cycle after the restarts")
        assert d.exit_code == 0 and not d.stop_event.is_set()


def test_a_scheduler_that_keeps_dying_exits_non_zero_for_systemd(tmp_path):
    """Row "worker thread keeps dying": after MAX_DEATHS deaths the process stops with exit 70
    (EX_SOFTWARE) so Restart=on-failure starts it again: never a zombie endpoint."""
    d = make_daemon([check("fine", lambda h, p: passed("ok"))], restart_backoff_s=0.01,
                    daemon_class=_Dies)
    d.deaths = -1  # forever
    rc = []
    t = threading.Thread(target=lambda: rc.append(d.serve(False)), daemon=True)
    t.start()
    t.join(30)
    assert not t.is_alive(), "the daemon kept running with a dead scheduler"
    assert rc == [EXIT_WORKER_DIED] == [70]
