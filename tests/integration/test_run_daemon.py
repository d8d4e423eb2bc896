"""The scheduler in-process, with real sockets: sd_notify (READY after the first full run,
WATCHDOG only while the main loop makes progress) and a hanging check (the endpoint keeps
answering, the check is unknown, the others go on)."""
import http.client
import socket
import threading
import time

import pytest

from agent.config import Config
from agent.daemon.sdnotify import Notifier
from agent.daemon.service import Daemon, Generation
from agent.logs import setup
from agent.model import Check, Interval, Severity, passed
from tests.integration.agentproc import wait_for
from tests.reliability.helpers import tree_source
from tests.unit.test_metrics import _parse, _value

pytestmark = pytest.mark.integration


def _check(cid, fn, timeout_s=0.5, interval=Interval.FAST):
    return Check(id=cid, title=cid, severity=Severity.CRITICAL, gates=("dra",), interval=interval,
                 remediation="-", run=fn, timeout_s=timeout_s)


def _loader(fast=0.2):
    config = Config.model_validate({"run": {"fast_interval": fast, "slow_interval": 5,
                                            "listen_address": "127.0.0.1:0"}})
    return lambda: Generation(config, None, None, "dra", [])


class _Blockable(Daemon):
    """Opening the host blocks while `block` is set: a main loop stuck outside any check."""

    block = threading.Event()
    release = threading.Event()

    def _open_host(self):
        if self.block.is_set():
            self.release.wait(30)
        return super()._open_host()


def _metrics(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        conn.request("GET", "/metrics")
        return _parse(conn.getresponse().read())
    finally:
        conn.close()


def _drain(sock, seconds):
    got = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sock.settimeout(max(0.01, end - time.monotonic()))
        try:
            data = sock.recv(4096).decode()
            got.append((time.monotonic(), data))
        except socket.timeout:
            break
    return got


def test_ready_after_first_run_and_watchdog_stops_when_loop_is_stuck(tmp_path):
    path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    first_done = []

    def slow_first(host, policy):
        time.sleep(0.3)
        first_done.append(time.monotonic())
        return passed("ok")

    notifier = Notifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "400000"})
    d = _Blockable([_check("slow", slow_first)], _loader(), tree_source(str(tmp_path)),
                   "9", setup(), notifier=notifier, stall_margin_s=0.5)
    d.block.clear()
    d.release.clear()
    t = threading.Thread(target=d.serve, kwargs={"install_signals": False}, daemon=True)
    t.start()
    try:
        msgs = _drain(sock, 3)
        ready = [ts for ts, m in msgs if "READY=1" in m]
        assert len(ready) == 1 and first_done and ready[0] >= first_done[0]
        assert "STATUS=gate dra open; 1 pass" in [m for _, m in msgs if "READY" in m][0]
        pings = [ts for ts, m in _drain(sock, 1.0) if m == "WATCHDOG=1"]
        assert len(pings) >= 2  # every ~0.2 s while progressing (slack for a loaded CI box)
        d.block.set()  # the next cycle sticks in host opening
        stuck_after = d.cycle_bound + 0.6
        _drain(sock, stuck_after)
        assert d.cycle_started is not None  # it is stuck inside a cycle
        late = [m for _, m in _drain(sock, 1.5) if m == "WATCHDOG=1"]
        assert late == [], "watchdog kept pinging a stuck main loop"
        d.block.clear()
        d.release.set()
        resumed = [m for _, m in _drain(sock, 1.5) if m == "WATCHDOG=1"]
        assert resumed, "watchdog did not resume after the loop recovered"
    finally:
        d.release.set()
        d.stop()
        t.join(10)
        sock.close()
    assert not t.is_alive()


def test_a_hanging_check_reports_unknown_and_the_endpoint_answers(tmp_path):
    hang = threading.Event()
    calls = []

    def hangs(host, policy):
        calls.append(1)
        hang.wait(60)
        return passed("never")

    d = Daemon([_check("hangs", hangs, 0.3), _check("fine", lambda h, p: passed("ok"))],
               _loader(0.2), tree_source(str(tmp_path)), "9", setup(), notifier=Notifier({}))
    t = threading.Thread(target=d.serve, kwargs={"install_signals": False}, daemon=True)
    t.start()
    try:
        port = d.server.port
        wait_for(lambda: d.report is not None, 5, "first report")
        for _ in range(10):  # the endpoint answers quickly throughout the hang
            started = time.monotonic()
            parsed = _metrics(port)
            assert time.monotonic() - started < 1.0  # the hang lasts 60 s
            time.sleep(0.1)
        assert _value(parsed, "gpu_node_agent_check_status", check="hangs", status="unknown") == 1
        assert _value(parsed, "gpu_node_agent_check_status", check="fine", status="pass") == 1
        wait_for(lambda: "still in progress" in d.results["hangs"].summary, 5, "second cycle")
        assert len(calls) == 1  # never restarted while still running
        # the other check keeps being re-run
        before = d.last_run["fine"]
        wait_for(lambda: d.last_run["fine"] > before, 3, "fine re-run")
    finally:
        hang.set()
        d.stop()
        t.join(10)
    assert not t.is_alive()
