"""Fault matrix, Kubernetes API rows: the publisher (agent/outputs/node/publish.py) against the HTTPS API
double (tests/kube_double.py) answering each fault, one test per row. Each asserts the outcome
the row promises: no "healthy" written while the API misbehaves, the next attempt within its
bound (backoff, Retry-After capped at the heartbeat interval), recovery when the API is back,
and, where a fault can stall a cycle (API down, a hung exec plugin), metrics scrapes answered
meanwhile by a running daemon.

Time: the publisher runs on a fake clock that drives both its wall and monotonic time, so
"within 300 s" is asserted on that clock, never on how long the test took."""
import json
import os
import socket

import pytest

from agent.daemon.sdnotify import Notifier
from agent.daemon.service import Daemon
from agent.logs import setup
from agent.model import Interval, passed
from tests.integration.agentproc import wait_for
from tests.kube_certs import CA
from tests.kube_double import kubeconfig_yaml
from tests.kube_reports import report
from tests.kube_setup import NODE, T0, Clock, make_publisher, serve_node
from tests.reliability.helpers import HEALTHY_ROOT, Running, check, generation, scrape, tree_source

HEALTH = "workload.example.com/gpu-healthy"
HEARTBEAT = 300.0  # the default heartbeat interval: the cap on any Retry-After


@pytest.fixture
def api(tmp_path):
    yield from serve_node(tmp_path)


def publisher(kc, clock, **kube):
    kube.setdefault("consecutive_opens", 1)
    return make_publisher(kc, clock, extra={"nfd": {"enabled": False, "path": "/nonexistent/x"}},
                          **kube)


def healthy_written(double):
    node = double.nodes[NODE]
    cond = next((c for c in node["status"]["conditions"] if c["type"] == "GPUReady"), None)
    return node["metadata"]["labels"].get(HEALTH) == "true" or (
        cond is not None and cond["status"] == "True")


def attempts_over(pub, clock, seconds, step=1.0):
    """Publish every ``step`` seconds of fake time; (time, result) of each real attempt."""
    out = []
    end = clock.t + seconds
    while clock.t < end:
        res = pub.publish(report())
        if not res.waiting:
            out.append((clock.t, res))
        clock.t += step
    return out


def closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once closed


# -- rows -----------------------------------------------------------------------------------
def test_api_down_backs_off_and_writes_nothing(api, tmp_path):
    double, _ = api
    dead = tmp_path / "dead"
    dead.write_text(kubeconfig_yaml(f"https://127.0.0.1:{closed_port()}", double.ca.path,
                                    {"token": "node-token"}))
    clock = Clock()
    pub = publisher(str(dead), clock)
    tries = attempts_over(pub, clock, 3600, step=60)  # an hour of healthy reports
    assert all(r.error and not r.writes for _, r in tries)
    # full jitter over 2 x the 300 s heartbeat interval; at rng 1.0 the window's end, so on
    # 60 s cycles one try every 600 s: 6 in the hour, not 60
    assert len(tries) == 6
    gaps = [b - a for (a, _), (b, _) in zip(tries, tries[1:])]
    assert gaps == [600] * 5
    assert not healthy_written(double)


def test_401_names_the_credentials_and_writes_nothing(api, tmp_path):
    double, _ = api
    kc = tmp_path / "bad"
    kc.write_text(kubeconfig_yaml(double.url, double.ca.path, {"token": "revoked"}))
    res = publisher(str(kc), Clock()).publish(report())
    assert "HTTP 401" in res.error and "the server rejected the credentials: bearer token" in res.error
    assert [e["status"] for e in double.log] == [401, 401]  # refreshed and retried once
    assert not healthy_written(double)


def test_401_from_an_exec_plugin_names_the_plugin(api, tmp_path):
    double, _ = api
    plugin = tmp_path / "aws-iam-authenticator"
    plugin.write_text("#!/bin/sh\necho '{\"apiVersion\":\"client.authentication.k8s.io/v1\","
                      "\"kind\":\"ExecCredential\",\"status\":{\"token\":\"stale\"}}'\n")
    plugin.chmod(0o755)
    kc = tmp_path / "exec"
    kc.write_text(kubeconfig_yaml(double.url, double.ca.path, {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin),
        "interactiveMode": "Never"}}))
    res = publisher(str(kc), Clock()).publish(report())
    assert "rejected the credentials: exec plugin aws-iam-authenticator" in res.error


def test_403_on_the_labels_holds_them_and_keeps_the_condition_current(api):
    double, kc = api
    clock = Clock()
    pub = publisher(kc, clock)
    double.inject(403, method="PATCH", message='nodes "gpu-host-1" is forbidden: is not allowed '
                  "to modify labels: x")
    first = pub.publish(report())
    assert "HTTP 403 Forbidden" in first.error and not first.fully_written
    assert [o.write for o in first.outcomes if o.ok] == ["status"]  # the condition went through
    mark = len(double.log)
    for _ in range(4):  # +60 .. +240 s: the labels are held, nothing is hot-retried
        clock.t += 60
        res = pub.publish(report())
        assert res.error is None and "(held, refused earlier)" in res.waiting
    assert double.log[mark:] == []
    clock.t = T0 + 300
    again = pub.publish(report())  # the hold is over: the labels are sent again
    assert again.error is None and double.nodes[NODE]["metadata"]["labels"][HEALTH] == "true"


def test_409_rereads_and_reapplies_in_the_same_cycle(api):
    double, kc = api
    clock = Clock()
    pub = publisher(kc, clock)
    pub.publish(report())
    double.inject(409, method="PATCH")
    clock.t += 60
    res = pub.publish(report({"gpu-ecc": "DBE"}))
    assert res.error is None and res.fully_written
    assert double.nodes[NODE]["metadata"]["labels"][HEALTH] == "false"


def retried_after(double, kc, retry_after):
    """Seconds of fake time between the 429 and the next request, and the Node in between."""
    clock = Clock()
    pub = publisher(kc, clock)
    pub.rng = lambda: 0.0  # a jitter wait of 0 s: the Retry-After alone sets the next try
    double.inject(429, retry_after=retry_after)
    first = pub.publish(report())
    assert "HTTP 429" in first.error and not healthy_written(double)
    start, sent = clock.t, len(double.log)
    while len(double.log) == sent and clock.t - start < 3600:
        clock.t += 1
        last = pub.publish(report())
    assert last.error is None and healthy_written(double)  # and then it goes through
    return clock.t - start


def test_429_with_a_sane_retry_after_waits_that_long(api):
    double, kc = api
    assert retried_after(double, kc, 120) == 120


def test_429_with_an_absurd_retry_after_is_capped_at_the_heartbeat_interval(api):
    double, kc = api
    assert retried_after(double, kc, "1e12") == HEARTBEAT  # not 1e12 s: silenced for good


@pytest.mark.parametrize("status", [500, 503])
def test_5xx_backs_off_writes_nothing_then_recovers(api, status):
    double, kc = api
    clock = Clock()
    pub = publisher(kc, clock)
    pub.rng = iter([0.01, 0.02, 0.03]).__next__
    double.inject(status, count=3)
    tries = attempts_over(pub, clock, 120)
    errors = [t for t, r in tries if r.error]
    assert len(errors) == 3 and not any(r.writes for _, r in tries[:3])
    # full jitter over 2 x 300 s: 600 x 0.01 = 6 s, then 600 x 0.02 = 12 s
    assert [b - a for a, b in zip(errors, errors[1:])] == [6, 12]
    assert healthy_written(double)  # after the faults: recovered


def test_tls_error_is_an_error_with_backoff(api, tmp_path):
    double, _ = api
    other = CA(str(tmp_path), name="some-other-ca")
    kc = tmp_path / "wrong-ca"
    kc.write_text(kubeconfig_yaml(double.url, other.path, {"token": "node-token"}))
    clock = Clock()
    tries = attempts_over(publisher(str(kc), clock), clock, 60)
    assert "TLS error" in tries[0][1].error
    assert len(tries) <= 4  # 5, 10, 20 s... not one per cycle
    assert double.log == []  # the handshake failed: no request reached the server
    assert not healthy_written(double)


def test_a_200_that_is_not_a_node_backs_off_like_an_error(api):
    double, kc = api
    clock = Clock()
    pub = publisher(kc, clock)
    double.inject(200, count=1000, method="GET", body=[1, 2])
    tries = attempts_over(pub, clock, 30)
    assert "the answer is not a Node (list)" in tries[0][1].error
    assert len(double.log) <= 3  # it was 19 requests in 30 s before
    assert not healthy_written(double)


def test_exec_plugin_hang_is_killed_and_backs_off(api, tmp_path):
    double, _ = api
    pidfile = tmp_path / "pid"
    plugin = tmp_path / "hangs"
    plugin.write_text(f"#!/bin/sh\necho $$ > {pidfile}\nexec sleep 60\n")
    plugin.chmod(0o755)
    kc = tmp_path / "exec"
    kc.write_text(kubeconfig_yaml(double.url, double.ca.path, {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin),
        "interactiveMode": "Never"}}))
    clock = Clock()
    pub = publisher(str(kc), clock, exec_timeout=1)
    res = pub.publish(report())
    assert "exec plugin hangs: no answer in 1s (killed)" in res.error
    pid = int(pidfile.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # killed with its process group, not left behind
    clock.t += 1
    assert pub.publish(report()).waiting  # backing off, not one plugin run per cycle
    assert double.log == [] and not healthy_written(double)


def test_scrapes_answered_while_the_publisher_is_stuck_on_a_hung_plugin(api, tmp_path):
    """Rows "API down" / "exec-plugin hang" for `run`: the publisher runs in its own thread
    (agent/daemon/parts.py), so metrics are served while it waits."""
    double, _ = api
    plugin = tmp_path / "hangs"
    plugin.write_text("#!/bin/sh\nexec sleep 60\n")
    plugin.chmod(0o755)
    kc = tmp_path / "exec"
    kc.write_text(kubeconfig_yaml(double.url, double.ca.path, {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin),
        "interactiveMode": "Never"}}))
    pub = publisher(str(kc), Clock(), exec_timeout=5)
    gen = generation(0.2)
    daemon = Daemon([check("ok", lambda host, policy: passed("ok"), interval=Interval.FAST)],
                    lambda: gen, tree_source(HEALTHY_ROOT), "test", setup(),
                    notifier=Notifier({}), outputs=[pub])
    with Running(daemon):
        wait_for(lambda: getattr(daemon, "server", None) is not None
                 and daemon.server.port, 10, "the metrics server")
        answered = 0
        for _ in range(20):
            status, body = scrape(daemon.server.port, timeout=10.0)
            answered += status == 200 and b"gpu_node_agent_gate_open" in body
        assert answered == 20
    assert not healthy_written(double)


def test_error_bodies_are_logged_bounded_and_without_control_characters(api, caplog):
    double, kc = api
    hostile = "evil\r\nFAKE LOG LINE level=critical\x1b[31m" + "x" * 5000
    double.inject(500, message=hostile)
    pub = publisher(kc, Clock())
    with caplog.at_level("WARNING", logger="agent.outputs.node.publish"):
        res = pub.publish(report())
    assert res.error and "\n" not in res.error and "\x1b" not in res.error
    logged = [r.getMessage() for r in caplog.records]
    assert logged and all("\n" not in m and "\r" not in m and "\x1b" not in m for m in logged)
    server_part = res.error.split("HTTP 500: ", 1)[1]
    assert len(server_part) <= 200 and server_part.startswith("evil FAKE LOG LINE")
    assert json.dumps(res.error)  # one JSON string
