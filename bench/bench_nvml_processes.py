"""How many processes `gpu-node-agent run` keeps on a simulated 8-GPU host, and each one's
resident memory (RSS and PSS from /proc/PID/smaps_rollup, Linux proc(5)).

    .venv-3.13/bin/python bench/bench_nvml_processes.py [--json]

It compiles the simulated libnvidia-ml (tests/nvml_sim), starts a live `run` (kernel log,
XID monitor, NVML worker) with the Node outputs off and its state directory in a temp dir,
waits for the first full run, lists the agent's process tree and stops it with SIGTERM.
Needs gcc and nvml.h (the test extras) and a readable /dev/kmsg (else the XID monitor, and
with it the XID event wait, is off: the script says so).

    .venv-3.13/bin/python bench/bench_nvml_processes.py --latency

The one worker's costs of waiting for XID events, on the same simulated host: its CPU while
idle (from /proc/PID/task/*/schedstat, nanoseconds on CPU, over 10 s), and the median
snapshot round trip of 15 requests in three set-ups measured in the same run: no event wait
(as `check` runs it), event waits with the agent's nudge (agent/nvml/process.py
NUDGE_SIGNAL), and event waits without it (signal 0), each as a ratio to the first.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.integration.agentproc import descendants  # noqa: E402
from tests.nvml_sim import simlib  # noqa: E402


def memory_kib(pid: int) -> Dict[str, int]:
    out = {}
    with open(f"/proc/{pid}/smaps_rollup") as fh:
        for line in fh:
            key, _, rest = line.partition(":")
            if key in ("Rss", "Pss"):
                out[key.lower() + "_kib"] = int(rest.split()[0])
    return out


def cmdline(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as fh:
        return fh.read().replace(b"\0", b" ").decode(errors="replace").strip()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def on_cpu_ns(pid: int) -> int:
    return sum(int(open(f"/proc/{pid}/task/{t}/schedstat").read().split()[0])
               for t in os.listdir(f"/proc/{pid}/task"))


def latency() -> int:
    import statistics

    import agent.nvml.supervisor as supervisor
    from agent.nvml.client import NvmlClient

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        built = simlib.build(tmp / "nvsim")
        scenario = simlib.write_scenario(simlib.resolve("healthy-8xh100.json"), tmp / "scn.json")
        env = simlib.worker_env(built, scenario)
        env.pop("LD_PRELOAD", None)
        medians = {}
        for name, events, nudge in (("no event wait", False, True),
                                    ("event waits, nudged", True, True),
                                    ("event waits, no nudge", True, False)):
            supervisor.NUDGE_SIGNAL = supervisor.NUDGE_SIGNAL if nudge else 0  # type: ignore
            client = NvmlClient(env=env, first_deadline_s=30)
            if events:
                client.watch_xid(lambda message: None)
            client.snapshot()
            if events and name == "event waits, nudged":
                pid = client.worker_pid or 0
                time.sleep(1.0)
                before, started = on_cpu_ns(pid), time.monotonic()
                time.sleep(10.0)
                spent = (on_cpu_ns(pid) - before) / 1e9 / (time.monotonic() - started)
                print(f"idle worker waiting for events: {spent * 100:.3f} % of a core")
            walls = []
            for _ in range(15):
                time.sleep(0.13)  # land anywhere in a wait
                walls.append(float(client.snapshot()["worker"]["wall_s"]))
            client.close()
            supervisor.NUDGE_SIGNAL = __import__("signal").SIGURG
            medians[name] = statistics.median(walls)
        base = medians["no event wait"]
        for name, value in medians.items():
            print(f"{name:24s} median snapshot {value * 1000:7.1f} ms  ({value / base:.2f}x)")
    return 0


def main() -> int:
    if "--latency" in sys.argv:
        return latency()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        built = simlib.build(tmp / "nvsim")
        scenario = simlib.write_scenario(simlib.resolve("healthy-8xh100.json"), tmp / "scn.json")
        env = simlib.worker_env(built, scenario)
        env.pop("LD_PRELOAD", None)  # the dlsym-logging shim is a test aid, not the worker's
        cfg = tmp / "agent.yaml"
        cfg.write_text(f"state_dir: {tmp / 'state'}\nrun:\n  fast_interval: 5\n"
                       "kube:\n  enabled: false\n")
        log = open(tmp / "agent.log", "wb")  # noqa: SIM115 (closed below)
        proc = subprocess.Popen(
            [sys.executable, "-m", "agent.cli", "run", "--config", str(cfg),
             "--listen-address", f"127.0.0.1:{free_port()}"],
            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(REPO))
        try:
            text = ""
            for _ in range(600):  # 60 s at most
                text = (tmp / "agent.log").read_text(errors="replace")
                if "first full run done" in text or proc.poll() is not None:
                    break
                time.sleep(0.1)
            time.sleep(3.0)  # a cycle more: the worker's steady state
            pids = [proc.pid, *sorted(descendants(proc.pid))]
            rows: List[Dict[str, Any]] = [
                {"pid": p, "cmd": cmdline(p)[:100], **memory_kib(p)} for p in pids]
            monitor_off = "XID monitor unavailable" in text
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
            log.close()
    rss_total = sum(int(r.get("rss_kib", 0)) for r in rows)
    pss_total = sum(int(r.get("pss_kib", 0)) for r in rows)
    result = {"processes": len(rows), "rows": rows, "xid_monitor_off": monitor_off,
              "rss_total_kib": rss_total, "pss_total_kib": pss_total}
    if "--json" in sys.argv:
        print(json.dumps(result, indent=1))
    else:
        for row in rows:
            print(f"{row['pid']:>8} rss {row.get('rss_kib', 0) / 1024:6.1f} MiB "
                  f"pss {row.get('pss_kib', 0) / 1024:6.1f} MiB  {row['cmd']}")
        print(f"{len(rows)} processes; rss {rss_total / 1024:.1f} MiB, "
              f"pss {pss_total / 1024:.1f} MiB in all"
              + ("; XID monitor OFF (no kernel log)" if monitor_off else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
