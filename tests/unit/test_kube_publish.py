"""Publisher cycles against the HTTPS API double on a fake clock: each reconcile rule through
the real client, and every fault docs/kubernetes.md lists. Asserts the stored Node."""
import json

import pytest

from agent.outputs.node.publish import Publisher
from agent.outputs.node.reconcile import rfc3339
from tests.kube_double import kubeconfig_yaml
from tests.kube_reports import config, report
from tests.kube_setup import NODE, Clock, make_publisher, serve_node

ALLOC = "workload.example.com/gpu-allocation"
HEALTH = "workload.example.com/gpu-healthy"


@pytest.fixture
def api(tmp_path):
    yield from serve_node(tmp_path, labels={"team": "ml"})


def publisher(kc, clock, dry_run=False, **kube):
    return make_publisher(kc, clock, dry_run=dry_run, **kube)


def labels(double):
    return double.nodes[NODE]["metadata"]["labels"]


def condition(double, ctype="GPUReady"):
    return next((c for c in double.nodes[NODE]["status"]["conditions"] if c["type"] == ctype), None)


def run(pub, clock, rep, cycles, step=60.0):
    out = []
    for _ in range(cycles):
        out.append(pub.publish(rep))
        clock.t += step
    return out


def no_taint_ever(double):
    return all("taints" not in json.dumps(e.get("body")) for e in double.log)


def test_converges_then_only_heartbeats(api):
    double, kc = api
    clock = Clock()
    pub = publisher(kc, clock)
    run(pub, clock, report(), 3)
    assert labels(double)[ALLOC] == "dra" and labels(double)[HEALTH] == "true"
    assert labels(double)["team"] == "ml"
    cond = condition(double)
    assert (cond["status"], cond["reason"]) == ("True", "GateOpen")
    mark = len(double.log)
    run(pub, clock, report(), 10)  # 600 s of steady state
    steady = double.log[mark:]
    assert {(e["method"], e["path"]) for e in steady} == {("PATCH", f"/api/v1/nodes/{NODE}/status")}
    assert len(steady) == 2  # one heartbeat per 300 s
    assert condition(double)["lastTransitionTime"] == cond["lastTransitionTime"]
    assert no_taint_ever(double)


def test_gpu_ecc_failure_keeps_allocation_label_flips_health_and_condition(api):
    double, kc = api
    clock = Clock()
    pub = publisher(kc, clock, consecutive_opens=1)
    run(pub, clock, report(), 1)
    run(pub, clock, report({"gpu-ecc": "GPU 2: 1 volatile uncorrectable ECC error"}), 1)
    assert labels(double)[ALLOC] == "dra"
    assert labels(double)[HEALTH] == "false"
    cond = condition(double)
    assert cond["status"] == "False" and cond["reason"] == "CheckFailed"
    # an added condition goes first on the real server (recorded: "SMP own status add GPUReady")
    assert [c["type"] for c in double.nodes[NODE]["status"]["conditions"]] == ["GPUReady", "Ready"]
    assert no_taint_ever(double)


def test_api_outage_for_the_whole_run_changes_nothing_and_never_raises(api, tmp_path):
    double, kc = api
    clock = Clock()
    pub = publisher(kc, clock, consecutive_opens=1)
    run(pub, clock, report({"gpu-xid": "XID 79"}), 1)
    before = json.loads(json.dumps(double.nodes[NODE]))
    dead = tmp_path / "dead-kubeconfig"
    dead.write_text(kubeconfig_yaml("https://127.0.0.1:9", double.ca.path, {"token": "node-token"}))
    down = publisher(str(dead), clock, consecutive_opens=1)
    results = run(down, clock, report(), 60)  # an hour of healthy reports, API down
    assert all(r.error or r.waiting for r in results)
    assert all(r.writes == [] for r in results)
    attempts = [r for r in results if r.error]
    assert 3 <= len(attempts) <= 20  # exponential backoff, not one try per cycle
    assert double.nodes[NODE] == before  # still unhealthy on the Node: nothing flipped


@pytest.mark.parametrize("status", [500, 503])
def test_5xx_backs_off_with_no_write_then_recovers(api, status):
    double, kc = api
    clock = Clock()
    pub = publisher(kc, clock, consecutive_opens=1)
    double.inject(status, count=1)
    first = pub.publish(report())
    assert f"HTTP {status}" in first.error and HEALTH not in labels(double)
    clock.t += 1
    n = len(double.log)
    assert pub.publish(report()).waiting and len(double.log) == n  # backing off: no request
    # full jitter over two heartbeat intervals, at rng 1.0 its end: 2 x 300 s after the 5xx
    clock.t += 598
    assert pub.publish(report()).waiting and len(double.log) == n
    clock.t += 1
    assert pub.publish(report()).error is None
    assert labels(double)[HEALTH] == "true"


def test_a_gpu_event_report_tries_once_inside_the_backoff(api):
    """An event-driven Report (an XID: agent/daemon/triggers.py) is not held for the rest of a
    jitter window of up to 600 s after a transient error: it tries once at once. A second
    event while still failing waits like a scheduled Report (no hot retry in an XID storm)."""
    from agent import records

    double, kc = api
    clock = Clock()
    pub = publisher(kc, clock, consecutive_opens=1)
    double.inject(503, count=1)
    assert "HTTP 503" in pub.publish(report()).error
    clock.t += 1
    n = len(double.log)
    assert pub.publish(report({"gpu-xid": "XID 79"})).waiting and len(double.log) == n
    event = records.replace(report({"gpu-xid": "XID 79"}), trigger="event")
    assert pub.publish(event).error is None and len(double.log) > n
    assert labels(double)[HEALTH] == "false" and condition(double)["status"] == "False"
    # a success ends the backoff: the next scheduled Report is not held by the old window
    clock.t += 1
    assert pub.publish(report()).waiting is None
    # and the run of failures: the next failure allows one early try again
    double.inject(503, count=1)
    clock.t += 300  # the next heartbeat is due, so the scheduled Report writes and fails
    assert "HTTP 503" in pub.publish(report()).error
    double.inject(503, count=1)
    clock.t += 1
    assert "HTTP 503" in pub.publish(event).error  # the early try, failing
    clock.t += 1
    n = len(double.log)
    assert pub.publish(event).waiting and len(double.log) == n  # used: waits


def test_429_honours_retry_after(api):
    double, kc = api
    clock = Clock()
    pub = publisher(kc, clock)
    double.inject(429, retry_after=120, message="too many requests")
    assert "429" in pub.publish(report()).error
    clock.t += 100
    n = len(double.log)
    assert pub.publish(report()).waiting and len(double.log) == n
    clock.t += 21
    assert pub.publish(report()).error is None


def test_403_reports_the_server_message_without_hot_retry(api):
    double, kc = api
    clock = Clock()
    pub = publisher(kc, clock)
    # the config refuses such a key (agent/outputs/node/labels.py); bypass it to see the API's answer
    pub.kcfg = pub.kcfg.model_copy(update={"health_label": "node-restriction.kubernetes.io/gpu-healthy"})
    res = pub.publish(report())
    assert "is not allowed to modify labels: node-restriction.kubernetes.io/gpu-healthy" in res.error
    n = len(double.log)
    for _ in range(4):
        clock.t += 60
        assert pub.publish(report()).waiting
    assert len(double.log) == n  # no retry within 5 minutes
    assert "node-restriction.kubernetes.io/gpu-healthy" not in labels(double)


def test_409_rereads_and_reapplies_in_the_same_cycle(api):
    double, kc = api
    clock = Clock()
    pub = publisher(kc, clock, consecutive_opens=1)
    pub.publish(report())
    double.inject(409, method="PATCH", message="the object has been modified")
    clock.t += 400
    res = pub.publish(report({"gpu-ecc": "DBE"}))
    assert res.error is None and res.writes
    assert labels(double)[HEALTH] == "false"
    seq = [(e["method"], e["status"]) for e in double.log[-5:]]
    # the refused PATCH, the re-read, the PATCH again, the condition, the transition's Event
    assert seq == [("PATCH", 409), ("GET", 200), ("PATCH", 200), ("PATCH", 200), ("POST", 201)]


def test_slow_api_times_out_and_changes_nothing(api):
    double, kc = api
    clock = Clock()
    pub = publisher(kc, clock)
    double.inject_hang(4, count=1)
    res = pub.publish(report())
    assert "no answer in 2s" in res.error
    assert HEALTH not in labels(double)


def test_connection_reset_is_an_error_not_a_crash(api):
    double, kc = api
    clock = Clock()
    pub = publisher(kc, clock)
    double.inject_reset(count=3)
    res = pub.publish(report())
    assert res.error and HEALTH not in labels(double)


def test_wrong_node_name_says_where_the_name_and_the_identity_came_from(api):
    double, kc = api
    double.add_node("gpu-host-9")
    for name in ("gpu-host-9", "no-such-node"):
        res = publisher(kc, Clock(), node_name=name).publish(report())
        assert "HTTP 403" in res.error and "\n" not in res.error
        assert "(name from config kube.node_name)" in res.error
        # the token's identity, from a SelfSubjectReview
        assert "the credentials are system:node:gpu-host-1 (from a SelfSubjectReview" in res.error
        assert "set kube.node_name: gpu-host-1" in res.error
    assert double.counts().get("POST", 0) == 2  # one SelfSubjectReview per wrong name


def test_not_registered_yet_is_waiting_not_an_error(api):
    double, kc = api
    double.nodes.pop(NODE)  # before the kubelet registered it: its own name is 404
    res = publisher(kc, Clock()).publish(report())
    assert res.error is None
    assert res.waiting.startswith(f"Node '{NODE}' is not registered yet")
    assert res.writes == [] and not res.fully_written


def test_cordon_on_fatal_and_uncordon_through_the_api(api):
    double, kc = api
    clock = Clock()
    pub = publisher(kc, clock, cordon_on_fatal=True)
    run(pub, clock, report({"gpu-xid": "XID 79: fell off the bus"}), 1)
    spec = double.nodes[NODE]["spec"]
    assert spec["unschedulable"] is True
    run(pub, clock, report(), 1)
    assert "unschedulable" not in double.nodes[NODE]["spec"]
    assert no_taint_ever(double)


def test_dry_run_reads_but_never_writes(api):
    double, kc = api
    clock = Clock()
    res = run(publisher(kc, clock, dry_run=True, consecutive_opens=1), clock, report(), 3)
    assert {e["method"] for e in double.log} == {"GET"}
    assert res[0].plan.writes and "would write" in "\n".join(res[0].lines())
    assert HEALTH not in labels(double)


def test_nfd_file_written_atomically_with_expiry_and_removed_when_turned_off(api, tmp_path):
    _, kc = api
    path = tmp_path / "features.d" / "gpu-node-agent"
    clock = Clock()
    cfg = config(kubeconfig=kc, node_name=NODE, consecutive_opens=1, enabled=False)
    cfg = cfg.model_copy(update={"nfd": cfg.nfd.model_copy(update={"enabled": True, "path": str(path)})})
    pub = Publisher(cfg, clock=clock)
    assert pub.publish(report()).nfd == f"wrote {path}"
    text = path.read_text()
    assert f"{ALLOC}=dra" in text and f"{HEALTH}=true" in text
    assert "# +expiry-time=2027-01-15T09:00:00Z" in text  # T0 + 3600 s
    clock.t += 60
    assert "up to date" in pub.publish(report()).nfd
    assert sorted(p.name for p in tmp_path.glob("features.d/*")) == ["gpu-node-agent"]
    clock.t += 60
    pub.publish(report({"gpu-ecc": "DBE"}))
    assert f"{HEALTH}=false" in path.read_text() and f"{ALLOC}=dra" in path.read_text()
    off = cfg.model_copy(update={"nfd": cfg.nfd.model_copy(update={"enabled": False})})
    assert "removed" in Publisher(off, clock=clock).publish(report()).nfd
    assert not path.exists()


def test_condition_type_change_deletes_the_old_condition_through_the_api(api):
    double, kc = api
    clock = Clock()
    pub = publisher(kc, clock, condition_type="OldGPUReady")
    run(pub, clock, report(), 1)
    assert condition(double, "OldGPUReady")["status"] == "True"
    pub.reconfigure(config(kubeconfig=kc, node_name=NODE, request_timeout=2))
    run(pub, clock, report(), 1)
    types = [c["type"] for c in double.nodes[NODE]["status"]["conditions"]]
    assert types == ["GPUReady", "Ready"]  # added first (as recorded); the kubelet's Ready kept
    assert pub.stats["errors"] == 0 and pub.stats["writes"] >= 3


def test_reconfigure_with_a_new_node_name_reconnects(api):
    double, kc = api
    double.add_node("gpu-host-2")
    double.add_token("t2", "system:node:gpu-host-2")
    clock = Clock()
    pub = publisher(kc, clock)
    pub.publish(report())
    other = double.dir + "/kc2"
    with open(other, "w") as fh:
        fh.write(kubeconfig_yaml(double.url, double.ca.path, {"token": "t2"}))
    pub.reconfigure(config(kubeconfig=other, node_name="gpu-host-2"))
    assert pub.publish(report()).node == "gpu-host-2"
    assert double.nodes["gpu-host-2"]["metadata"]["labels"][HEALTH] == "true"


def test_api_down_later_then_back(api):
    double, kc = api
    clock = Clock()
    pub = publisher(kc, clock, consecutive_opens=1)
    run(pub, clock, report({"gpu-ecc": "DBE"}), 1)
    assert labels(double)[HEALTH] == "false"
    double.inject_reset(count=10_000)
    results = run(pub, clock, report(), 20)  # healthy reports while the API is down
    assert all(r.error or r.waiting for r in results) and labels(double)[HEALTH] == "false"
    assert condition(double)["status"] == "False"
    double.faults.clear()
    clock.t += 600
    assert pub.publish(report()).error is None
    assert labels(double)[HEALTH] == "true" and condition(double)["status"] == "True"


def test_wall_clock_jumps_neither_silence_nor_flood_the_heartbeat(api):
    """Intervals run on the monotonic clock; only the timestamps written follow the wall
    clock. +1 day then back: the heartbeats stay 300 s apart in monotonic time."""
    double, kc = api
    wall, mono = Clock(), Clock(t=1000.0)
    pub = Publisher(config(kubeconfig=kc, node_name=NODE, request_timeout=2), clock=wall,
                    monotonic=mono, rng=lambda: 1.0)
    beats = []

    def cycle(step):
        wall.t += step
        mono.t += step
        n = len(double.log)
        pub.publish(report())
        if any(e["path"].endswith("/status") for e in double.log[n:]):
            beats.append(mono.t)

    cycle(0)
    for _ in range(5):
        cycle(60)
    wall.t += 86400  # +1 day
    for _ in range(5):
        cycle(60)
    wall.t -= 86400 + 3600  # back, and an hour further
    for _ in range(10):
        cycle(60)
    # 20 cycles of 60 s: one beat per 300 s, neither one at each jump nor none after it
    assert [b - beats[0] for b in beats] == [0, 300, 600, 900, 1200]
    assert condition(double)["lastHeartbeatTime"] == rfc3339(wall.t)  # wall time written


def test_backoff_runs_on_the_monotonic_clock_through_a_jump_back(api):
    double, kc = api
    wall, mono = Clock(), Clock(t=1000.0)
    pub = Publisher(config(kubeconfig=kc, node_name=NODE, request_timeout=2), clock=wall,
                    monotonic=mono, rng=lambda: 1.0)
    double.inject(503)
    assert "HTTP 503" in pub.publish(report()).error  # next try in 5 s
    wall.t -= 3600  # the wall clock jumps back an hour during the backoff
    mono.t += 5
    assert pub.publish(report()).error is None  # on schedule, not an hour later
