"""Slowloris against `gpu-node-agent run`: scrapes from 127.0.0.1 while N other loopback
addresses (127.0.0.2 and up) hold idle or trickling connections, beside the same scrapes
with no attacker measured in the same run (the reference).

    python bench/bench_slowloris.py [--attackers 500] [--scrapes 200] [--json out.json]

Reports: scrapes answered (200 within a 10 s scrape timeout), scrape latency p50/p99 with and
without the attack and their ratio, the agent's peak RSS (VmHWM, against the unit's
MemoryMax=128M) and CPU seconds used during the attack. Half the attacker connections send
nothing; half send a partial request and one more header byte every 2 s.
"""
import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Dict, List

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.integration.agentproc import BUNDLES, start_agent, wait_for  # noqa: E402
from tests.reliability.helpers import emit_json, raise_nofile, scrape, slowloris, still_open  # noqa: E402


def _pct(values: List[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100.0 * (len(ordered) - 1))))]


def _scrapes(port: int, n: int) -> Dict[str, Any]:
    lat, answered = [], 0
    for _ in range(n):
        t0 = time.monotonic()
        try:
            status, _ = scrape(port, timeout=10.0)
            answered += status == 200
        except OSError:
            pass
        lat.append(time.monotonic() - t0)
        time.sleep(0.02)
    return {"answered": answered, "total": n, "p50_ms": _pct(lat, 50) * 1e3,
            "p99_ms": _pct(lat, 99) * 1e3}


def _proc_status(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def _cpu_s(pid: int) -> float:
    import os

    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--attackers", type=int, default=500)
    ap.add_argument("--scrapes", type=int, default=200)
    ap.add_argument("--json")
    args = ap.parse_args()
    raise_nofile(args.attackers * 2 + 256)
    tmp = Path(tempfile.mkdtemp(prefix="bench-slowloris-"))
    agent, port = start_agent(tmp, ["--bundle", str(BUNDLES / "host-foundation-only")],
                              "run:\n  fast_interval: 600\n")
    holders: List[Any] = []
    stop = threading.Event()
    try:
        reference = _scrapes(port, args.scrapes)

        t = threading.Thread(target=slowloris, args=(port, args.attackers, stop, holders),
                             daemon=True)
        cpu0 = _cpu_s(agent.pid)
        t.start()
        wait_for(lambda: len(holders) == args.attackers, 120, "attacker connections")
        held = sum(still_open(s) for s in holders)
        attacked = _scrapes(port, args.scrapes)
        cpu = _cpu_s(agent.pid) - cpu0
        result = {
            "attackers": args.attackers, "attackers_held_at_start": held,
            "reference": reference, "under_attack": attacked,
            "answered_pct": 100.0 * attacked["answered"] / attacked["total"],
            "p50_ratio": attacked["p50_ms"] / max(reference["p50_ms"], 1e-6),
            "p99_ratio": attacked["p99_ms"] / max(reference["p99_ms"], 1e-6),
            "agent_peak_rss_mib": _proc_status(agent.pid, "VmHWM") / 1024.0,
            "agent_rss_mib_now": _proc_status(agent.pid, "VmRSS") / 1024.0,
            "memory_max_mib": 128,
            "agent_cpu_s_during_attack": cpu,
        }
    finally:
        stop.set()
        for sock in holders:
            sock.close()
        agent.stop()
    emit_json(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
