"""API requests per hour per node at steady state with default settings, counted by the HTTPS
API double (tests/kube_double.py) over a time-scaled run, against a naive peer measured in the
same run (GET the Node, merge-patch the labels, patch the condition, every cycle); and the
requests and exec-plugin runs of one `check --apply` (every check skipped, so the gate is open
and both writes are needed).

    python bench/bench_kube.py [--hours 3] [--fast 60] [--slow 900]

Simulated time: the agent's cycle is `run.fast_interval` (60 s by default); allocation-owner
(fast) reads the `node` fact every cycle and runtimeclass-handler (slow) the `runtimeclasses`
fact every slow interval, both through agent/kube/facts.py; the Publisher runs once per
cycle. Requests are real HTTPS requests on loopback; only the clock is simulated. The first
hour (convergence) is left out of the steady-state figure. Prints figures; asserts nothing.
"""
import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from agent.config import Config  # noqa: E402
from agent.kube.client import KubeClient  # noqa: E402
from agent.kube.facts import KubeFacts  # noqa: E402
from agent.kube.kubeconfig import load  # noqa: E402
from agent.model import ALL_PATHS, CheckResult, Severity, Status  # noqa: E402
from agent.outputs.node.publish import Publisher  # noqa: E402
from agent.report import build_report  # noqa: E402
from tests.kube_double import KubeDouble, kubeconfig_yaml  # noqa: E402

NODE = "gpu-host-1"
HOUR = 3600.0


def healthy_report():
    results = [
        CheckResult(cid, cid, Severity.CRITICAL, Status.PASS, "ok", "", ALL_PATHS, {}, 0.0)
        for cid in ("driver-loaded", "nvml-responsive", "gpu-ecc", "gpu-xid", "allocation-owner")
    ]
    return build_report(results, "dra", False, "bench", 0.0, "bench")


def by_kind(entries):
    out = {"GET": 0, "PATCH node": 0, "PATCH status": 0}
    for e in entries:
        if e["method"] == "GET":
            out["GET"] += 1
        elif e["path"].endswith("/status"):
            out["PATCH status"] += 1
        else:
            out["PATCH node"] += 1
    return out


def agent_run(double, kc, hours, fast, slow):
    now = [1_800_000_000.0]
    cfg = Config.model_validate({"kube": {"kubeconfig": kc, "node_name": NODE}})
    pub = Publisher(cfg, clock=lambda: now[0])
    facts = KubeFacts(cfg, clock=lambda: now[0], session=pub.session)  # as agent/cli_kube.py wires
    report = healthy_report()
    start, mark, walls = now[0], None, []
    next_slow = now[0]
    while now[0] - start < hours * HOUR:
        if mark is None and now[0] - start >= HOUR:
            mark = len(double.log)
        t0 = time.perf_counter()
        facts.fact("node")  # allocation-owner, fast
        if now[0] >= next_slow:
            facts.fact("runtimeclasses")  # runtimeclass-handler, slow
            next_slow += slow
        result = pub.publish(report)
        walls.append(time.perf_counter() - t0)
        assert result.error is None, result.error
        now[0] += fast
    pub.close()
    facts.close()
    return double.log[mark:], walls


def naive_run(double, kc, hours, fast):
    client = KubeClient(load(kc), timeout=10)
    label = {"metadata": {"labels": {"workload.example.com/gpu-healthy": "true"}}}
    cycles, mark = int(hours * HOUR / fast), None
    for i in range(cycles):
        if mark is None and i * fast >= HOUR:
            mark = len(double.log)
        client.get_node(NODE)
        client.patch_node(NODE, label)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        client.patch_node_status(NODE, {"status": {"conditions": [{
            "type": "GPUReady", "status": "True", "reason": "GateOpen", "message": "ok",
            "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}]}})
    client.close()
    return double.log[mark:]


def check_apply_counts(tmp):
    """One `gpu-node-agent check --apply` in this process, exec-plugin credentials."""
    import io
    import os
    from contextlib import redirect_stderr, redirect_stdout

    from agent.cli import main as cli_main
    from checks.registry import ALL_CHECKS

    double = KubeDouble(tmp).start()
    try:
        double.add_node(NODE)
        double.add_runtimeclass("nvidia", "nvidia")
        double.add_token("exec-token", f"system:node:{NODE}")
        runs = Path(tmp) / "exec-runs"
        plugin = Path(tmp) / "plugin.sh"
        plugin.write_text(
            f"#!/bin/sh\necho run >> {runs}\n"
            "echo '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":"
            "\"ExecCredential\",\"status\":{\"token\":\"exec-token\"}}'\n")
        os.chmod(plugin, 0o755)
        kc = Path(tmp) / "kubeconfig-exec"
        kc.write_text(kubeconfig_yaml(double.url, double.ca.path, {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin),
            "interactiveMode": "Never"}}))
        cfg = Path(tmp) / "config.yaml"
        cfg.write_text(f"kube:\n  kubeconfig: {kc}\n  node_name: {NODE}\n"
                       f"nfd:\n  enabled: false\n  path: {tmp}/features.d/x\n")
        skip = ",".join(c.id for c in ALL_CHECKS if c.id != "runtimeclass-handler")
        out = io.StringIO()
        with redirect_stdout(out), redirect_stderr(io.StringIO()):
            rc = cli_main(["check", "--config", str(cfg), "--apply", "--skip", skip])
        counts = {"GET node": 0, "GET runtimeclasses": 0, "PATCH node": 0, "PATCH status": 0}
        for e in double.log:
            if e["path"].endswith("/runtimeclasses"):
                counts["GET runtimeclasses"] += 1
            elif e["method"] == "GET":
                counts["GET node"] += 1
            elif e["path"].endswith("/status"):
                counts["PATCH status"] += 1
            elif e["method"] == "PATCH":
                counts["PATCH node"] += 1
            else:
                counts[f"{e['method']} {e['path']}"] = counts.get(f"{e['method']} {e['path']}",
                                                                   0) + 1
        execs = len(runs.read_text().splitlines()) if runs.exists() else 0
        return rc, counts, execs
    finally:
        double.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hours", type=float, default=3.0)
    ap.add_argument("--fast", type=float, default=60.0)
    ap.add_argument("--slow", type=float, default=900.0)
    args = ap.parse_args()
    steady_hours = args.hours - 1
    with tempfile.TemporaryDirectory() as tmp:
        double = KubeDouble(tmp).start()
        try:
            double.add_node(NODE)
            double.add_runtimeclass("nvidia", "nvidia")
            double.add_token("t", f"system:node:{NODE}")
            kc = Path(tmp) / "kubeconfig"
            kc.write_text(kubeconfig_yaml(double.url, double.ca.path, {"token": "t"}))
            t0 = time.perf_counter()
            ours, walls = agent_run(double, str(kc), args.hours, args.fast, args.slow)
            agent_wall = time.perf_counter() - t0
            double.log.clear()
            peer = naive_run(double, str(kc), args.hours, args.fast)
        finally:
            double.stop()
    a, p = by_kind(ours), by_kind(peer)
    per_h = {k: v / steady_hours for k, v in a.items()}
    peer_h = {k: v / steady_hours for k, v in p.items()}
    total_a, total_p = sum(per_h.values()), sum(peer_h.values())
    print(f"time-scaled run: {args.hours:g} h simulated, cycle {args.fast:g} s, slow {args.slow:g} s, "
          f"{agent_wall:.1f} s wall; steady state = hours 2..{args.hours:g}")
    print("requests per hour per node at steady state (defaults):")
    for k in per_h:
        print(f"  agent  {k:<13} {per_h[k]:6.1f}   naive peer {peer_h[k]:6.1f}")
    print(f"  total  agent {total_a:.1f}/h, naive peer {total_p:.1f}/h, ratio peer/agent "
          f"{total_p / total_a:.1f}x")
    writes = per_h["PATCH node"] + per_h["PATCH status"]
    print(f"  writes: {writes:.1f}/h, all heartbeats: {per_h['PATCH node'] == 0}")
    with tempfile.TemporaryDirectory() as tmp:
        rc, counts, execs = check_apply_counts(tmp)
    print(f"one `check --apply` (exit {rc}; runtimeclass-handler runs, every other check "
          f"skipped): " + ", ".join(f"{k} {v}" for k, v in counts.items())
          + f", exec plugin runs {execs}")
    print(f"agent cycle wall time (facts + publish, loopback HTTPS): median "
          f"{statistics.median(walls) * 1000:.2f} ms, max {max(walls) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
