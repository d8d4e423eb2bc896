"""The Publisher as one of `run`'s outputs (the real Daemon, real sockets, the HTTPS API
double): with the API hanging for the whole run the metrics endpoint keeps answering and the
Node is untouched; with the API up the Node converges."""
import http.client
import threading
import time

import pytest

from agent.config import Config
from agent.daemon.sdnotify import Notifier
from agent.daemon.service import Daemon, Generation
from agent.logs import setup
from agent.model import Check, Interval, Severity, passed
from agent.outputs.node.publish import Publisher
from tests.integration.agentproc import wait_for
from tests.kube_setup import NODE, serve_node
from tests.reliability.helpers import tree_source

pytestmark = pytest.mark.integration


def _config(kc):
    return Config.model_validate({
        "run": {"fast_interval": 0.2, "slow_interval": 5, "listen_address": "127.0.0.1:0"},
        "kube": {"kubeconfig": kc, "node_name": NODE, "request_timeout": 1,
                 "consecutive_opens": 2},
    })


@pytest.fixture
def api(tmp_path):
    yield from serve_node(tmp_path, token="t")


def _daemon(tmp_path, config):
    check = Check(id="fine", title="fine", severity=Severity.CRITICAL, gates=("dra",),
                  interval=Interval.FAST, remediation="-", run=lambda h, p: passed("ok"))
    pub = Publisher(config)
    d = Daemon([check], lambda: Generation(config, None, None, "dra", []),
               tree_source(str(tmp_path)), "9", setup(), notifier=Notifier({}),
               outputs=[pub])
    t = threading.Thread(target=d.serve, kwargs={"install_signals": False}, daemon=True)
    t.start()
    return d, t, pub


def _scrape(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        conn.request("GET", "/metrics")
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_api_hanging_for_the_whole_run_keeps_metrics_and_changes_nothing(api, tmp_path):
    double, kc = api
    before = repr(double.nodes[NODE])
    double.inject_hang(30, count=1000)
    d, t, pub = _daemon(tmp_path, _config(kc))
    try:
        wait_for(lambda: d.report is not None, 5, "first report")
        end = time.monotonic() + 3
        while time.monotonic() < end:
            started = time.monotonic()
            status, body = _scrape(d.server.port)
            assert status == 200 and b"gpu_node_agent_check_status" in body
            assert time.monotonic() - started < 0.5
            time.sleep(0.2)
        assert len(double.log) >= 1  # the publisher did try
        assert all(e.get("status") is None for e in double.log)  # none answered yet
    finally:
        d.stop_event.set()
        t.join(10)
        pub.close()
    assert repr(double.nodes[NODE]) == before


def test_node_converges_through_the_daemon(api, tmp_path):
    double, kc = api
    d, t, pub = _daemon(tmp_path, _config(kc))
    try:
        wait_for(lambda: double.nodes[NODE]["metadata"]["labels"].get(
            "workload.example.com/gpu-allocation") == "dra", 10, "allocation label")
        labels = double.nodes[NODE]["metadata"]["labels"]
        assert labels["workload.example.com/gpu-healthy"] == "true"
        cond = [c for c in double.nodes[NODE]["status"]["conditions"] if c["type"] == "GPUReady"]
        assert cond and cond[0]["status"] == "True"
    finally:
        d.stop_event.set()
        t.join(10)
        pub.close()
