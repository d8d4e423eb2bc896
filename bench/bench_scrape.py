"""Scrape latency, throughput, memory and CPU of `gpu-node-agent run`, beside Debian's
prometheus-node-exporter measured in the same run on the same machine.

    python bench/bench_scrape.py [--duration 10] [--cpu-seconds 60] [--json out.json]

The agent runs as on a real host (`run` with no --bundle/--host-root: this machine's files and
commands, the XID monitor on /dev/kmsg, the Node publisher loaded) with the real NVML worker
against the simulated libnvidia-ml (8x H100, tests/nvml_sim, via LD_LIBRARY_PATH), so RSS covers
both processes with every module the agent loads in production. Scrapes are driven by `wrk --latency` (C, not Python: on 2 cores a Python client
would compete with what it measures) on keep-alive connections, 1 and 20 at a time.

CPU per hour at the default intervals (fast 60 s, slow 900 s) is measured time-scaled: the
agent runs with both intervals divided by K (default 60: fast 1 s, slow 15 s) for T seconds,
which is the check work of T*K seconds at default intervals; the per-second idle cost (the
1 s scheduler tick, the watchdog) does not scale, so it is measured separately on an agent
with hour-long intervals and added back at its real rate:
    cpu/h = (cpu_scaled - idle_rate*T) * 3600/(T*K) + idle_rate*3600.
Commands the checks run (chronyc, containerd, kubelet, nvidia-ctk where installed) are run for
real and counted (children's CPU time).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.components import locate  # noqa: E402
from tests.integration.agentproc import (  # noqa: E402
    Proc,
    free_port,
    http_get,
    start_agent,
    wait_for,
)

UNIT = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3}


def _ms(text: str) -> float:
    m = re.match(r"([\d.]+)(us|ms|s|m)", text)
    if not m:
        raise ValueError(text)
    return float(m.group(1)) * UNIT[m.group(2)]


def wrk(url: str, connections: int, duration: int) -> Dict[str, float]:
    threads = 1 if connections == 1 else 2
    out = subprocess.run(
        [locate("wrk") or "wrk", "--latency", f"-t{threads}", f"-c{connections}", f"-d{duration}s",
         "--timeout", "5s", url], capture_output=True, text=True, timeout=duration + 60,
        check=True).stdout
    pct = {p: _ms(v) for p, v in re.findall(r"^\s+(50|99)%\s+(\S+)", out, re.M)}
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {"p50_ms": pct["50"], "p99_ms": pct["99"], "rps": rps,
            "non2xx": float(errors.group(1)) if errors else 0.0}


def tree_rss_mib(pid: int) -> Dict[str, float]:
    import psutil

    main = psutil.Process(pid)
    kids = main.children(recursive=True)
    rss = {"main": main.memory_info().rss / 2**20}
    rss["children"] = sum(k.memory_info().rss for k in kids) / 2**20
    rss["total"] = rss["main"] + rss["children"]
    rss["nprocs"] = 1 + len(kids)
    union: set = set()
    for proc_pid in [pid] + [k.pid for k in kids]:
        pages = resident_pfns(proc_pid)
        if pages is None:
            return rss
        union |= pages
    rss["union"] = len(union) * 4096 / 2**20
    return rss


def resident_pfns(pid: int) -> Optional[set]:
    """Physical page frames resident for a process (/proc/PID/pagemap, root only): with
    them, pages the agent and its worker share (the interpreter, libc) count once."""
    pfns = set()
    try:
        with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/pagemap", "rb") as pm:
            for line in maps:
                lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
                pm.seek(lo // 4096 * 8)
                data = pm.read((hi - lo) // 4096 * 8)
                for i in range(0, len(data), 8):
                    entry = int.from_bytes(data[i:i + 8], "little")
                    if entry >> 63 & 1:
                        pfns.add(entry & ((1 << 55) - 1))
    except OSError:
        return None
    return pfns if pfns and 0 not in pfns else None  # PFNs read as 0 without CAP_SYS_ADMIN


def tree_cpu_s(pid: int) -> float:
    import psutil

    main = psutil.Process(pid)
    t = main.cpu_times()
    total = t.user + t.system + t.children_user + t.children_system
    for kid in main.children(recursive=True):
        kt = kid.cpu_times()
        total += kt.user + kt.system
    return total


def sim_env(tmp: Path) -> Dict[str, str]:
    from tests.nvml_sim import simlib

    built = simlib.build(tmp / "nvsim")
    scenario = simlib.write_scenario(simlib.resolve("healthy-8xh100.json"), tmp / "scn.json")
    env = simlib.worker_env(built, scenario)
    env.pop("LD_PRELOAD", None)
    env["MALLOC_ARENA_MAX"] = "2"  # as systemd/gpu-node-agent.service runs it
    return env


def agent_args() -> List[str]:
    return []  # the live host: real files and commands, all modules (kube, XID monitor) loaded


def agent_config(tmp: Path, fast: float = 60, slow: float = 900) -> str:
    return (f"state_dir: {tmp / 'state'}\nrun:\n  fast_interval: {fast:g}\n"
            f"  slow_interval: {slow:g}\n")


def measure_cpu(tmp: Path, env: Dict[str, str], seconds: int, scale: float) -> Dict[str, float]:
    # idle rate: intervals of an hour, first cycle excluded
    idle, _ = start_agent(tmp, agent_args(), agent_config(tmp, 3600, 3600), env=env, name="idle")
    try:
        time.sleep(2)
        c0 = tree_cpu_s(idle.pid)
        idle_s = max(10, seconds // 2)  # psutil counts CPU in 10 ms ticks
        time.sleep(idle_s)
        idle_rate = (tree_cpu_s(idle.pid) - c0) / idle_s
    finally:
        idle.stop()
    cfg = agent_config(tmp, 60 / scale, 900 / scale)
    agent, _ = start_agent(tmp, agent_args(), cfg, env=env, name="scaled")
    try:
        c0, t0 = tree_cpu_s(agent.pid), time.monotonic()
        time.sleep(seconds)
        cpu, wall = tree_cpu_s(agent.pid) - c0, time.monotonic() - t0
    finally:
        agent.stop()
    per_hour = (cpu - idle_rate * wall) * 3600 / (wall * scale) + idle_rate * 3600
    return {"scaled_cpu_s": cpu, "wall_s": wall, "scale": scale, "idle_cpu_per_s": idle_rate,
            "cpu_s_per_hour": per_hour}


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=int, default=10, help="seconds per wrk run")
    ap.add_argument("--cpu-seconds", type=int, default=60, help="time-scaled CPU run length")
    ap.add_argument("--scale", type=float, default=60.0, help="interval divisor K")
    ap.add_argument("--json", help="write the figures here too")
    args = ap.parse_args(argv)
    for binary in ("wrk", "node_exporter"):  # unpacked into .cache/ci (tests/components.py)
        if locate(binary) is None:
            print(f"{binary} not found: run .ci/setup.d/50-prometheus.sh", file=sys.stderr)
            return 2
    results: Dict[str, Any] = {"cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="bench-scrape-") as tmpdir:
        tmp = Path(tmpdir)
        env = sim_env(tmp)
        agent, aport = start_agent(tmp, agent_args(), agent_config(tmp), env=env)
        nport = free_port()
        node = Proc([str(locate("node_exporter")), f"--web.listen-address=127.0.0.1:{nport}"],
                    tmp / "node.log")
        try:
            wait_for(lambda: http_get(f"http://127.0.0.1:{nport}/metrics"), 30, "node_exporter")
            body = http_get(f"http://127.0.0.1:{aport}/metrics")
            results["agent_body_bytes"] = len(body)
            results["agent_series"] = sum(1 for ln in body.splitlines() if ln and ln[:1] != b"#")
            for name, url in (("agent", f"http://127.0.0.1:{aport}/metrics"),
                              ("node_exporter", f"http://127.0.0.1:{nport}/metrics")):
                for conns in (1, 20):
                    results[f"{name}_c{conns}"] = wrk(url, conns, args.duration)
            results["agent_rss_mib"] = tree_rss_mib(agent.pid)
            results["node_exporter_rss_mib"] = tree_rss_mib(node.pid)
        finally:
            node.stop()
            agent.stop()
        results["cpu"] = measure_cpu(tmp, env, args.cpu_seconds, args.scale)
    report(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


def report(r: Dict[str, Any]) -> None:
    a1, a20, n1, n20 = r["agent_c1"], r["agent_c20"], r["node_exporter_c1"], r["node_exporter_c20"]
    print(f"machine: {r['cpus']} CPUs; agent exposition {r['agent_body_bytes']} bytes, "
          f"{r['agent_series']} series (8 simulated GPUs)")
    print(f"{'':24}{'p50 ms':>10}{'p99 ms':>10}{'req/s':>12}")
    for label, row in (("agent, 1 scraper", a1), ("node_exporter, 1", n1),
                       ("agent, 20 scrapers", a20), ("node_exporter, 20", n20)):
        print(f"{label:24}{row['p50_ms']:>10.2f}{row['p99_ms']:>10.2f}{row['rps']:>12.0f}")
    rss = r["agent_rss_mib"]
    print(f"agent RSS: {rss['total']:.1f} MiB summed ({rss['main']:.1f} main + "
          f"{rss['children']:.1f} NVML worker, {rss['nprocs']} processes); "
          f"{rss.get('union', float('nan')):.1f} MiB resident counting pages the two share once; "
          f"node_exporter {r['node_exporter_rss_mib']['total']:.1f} MiB")
    cpu = r["cpu"]
    print(f"load average at the end: {os.getloadavg()[0]:.1f} (latency tails depend on it)")
    print(f"agent CPU at default intervals: {cpu['cpu_s_per_hour']:.1f} s per hour "
          f"(time-scaled x{cpu['scale']:g} for {cpu['wall_s']:.0f} s; idle "
          f"{cpu['idle_cpu_per_s'] * 3600:.1f} s/h of it)")
    checks = [
        ("RSS < 60 MiB (agent + worker, summed RSS)", rss["total"] < 60),
        ("RSS < 60 MiB (agent + worker, shared pages once)", rss.get("union", 1e9) < 60),
        ("p99 < 5 ms at 1 scraper", a1["p99_ms"] < 5),
        ("p99 at 20 no worse than node_exporter's", a20["p99_ms"] <= n20["p99_ms"]),
        ("req/s at 20 >= 2x node_exporter's", a20["rps"] >= 2 * n20["rps"]),
        ("no non-2xx responses", a1["non2xx"] == a20["non2xx"] == 0),
    ]
    print(f"ratios: req/s at 20 = {a20['rps'] / max(n20['rps'], 1e-9):.1f}x node_exporter; "
          f"p99 at 20 = {a20['p99_ms'] / max(n20['p99_ms'], 1e-9):.3f}x node_exporter's")
    for text, ok in checks:
        print(f"  [{'ok' if ok else 'MISSED'}] {text}")


if __name__ == "__main__":
    sys.exit(main())
