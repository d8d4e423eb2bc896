"""NVML cost per cycle: the agent's worker + client, and the whole GPU check run, against the
floor (the same pynvml calls made directly in one process), all measured in this run on the
simulated libnvidia-ml (8x H100). Prints wall and CPU time per cycle and the ratios.

    python bench/bench_nvml.py [--cycles 200]

Needs gcc and nvml.h (the nvidia-nvml-dev wheel), like the NVML tests.
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, Tuple

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agent.engine import Engine  # noqa: E402
from agent.host.seam import Host, StaticFacts, StaticGpus  # noqa: E402
from agent.nvml.client import NvmlClient  # noqa: E402
from checks.policy import ResolvedPolicy, load_policy  # noqa: E402
from checks.registry import ALL_CHECKS  # noqa: E402
from tests.nvml_sim import simlib  # noqa: E402

# The floor: every NVML call the worker makes for one snapshot, straight through pynvml in
# one already-initialised process, no JSON, no pipe, no dicts beyond the return values.
FLOOR = r"""
import ctypes, json, sys, time, pynvml
cycles = int(sys.argv[1])
pynvml.nvmlInit()
def one():
    pynvml.nvmlSystemGetDriverVersion(); pynvml.nvmlSystemGetNVMLVersion()
    pynvml.nvmlSystemGetCudaDriverVersion()
    for i in range(pynvml.nvmlDeviceGetCount()):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        pynvml.nvmlDeviceGetUUID(h); pynvml.nvmlDeviceGetName(h); pynvml.nvmlDeviceGetPciInfo(h)
        pynvml.nvmlDeviceGetMemoryInfo(h)
        pynvml.nvmlDeviceGetTemperature(h, 0)
        pynvml.nvmlDeviceGetTemperatureThreshold(h, 1); pynvml.nvmlDeviceGetTemperatureThreshold(h, 0)
        pynvml.nvmlDeviceGetEccMode(h)
        for c in (0, 1):
            for k in (0, 1):
                pynvml.nvmlDeviceGetTotalEccErrors(h, c, k)
        pynvml.nvmlDeviceGetRemappedRows(h)
        pynvml.nvmlDeviceGetCurrentClocksEventReasons(h)
        pynvml.nvmlDeviceGetCurrPcieLinkGeneration(h); pynvml.nvmlDeviceGetMaxPcieLinkGeneration(h)
        pynvml.nvmlDeviceGetCurrPcieLinkWidth(h); pynvml.nvmlDeviceGetMaxPcieLinkWidth(h)
        for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
            try:
                pynvml.nvmlDeviceGetNvLinkState(h, link)
            except pynvml.NVMLError:
                break
        pynvml.nvmlDeviceGetMigMode(h)
        info = pynvml.c_nvmlGpuFabricInfo_t()
        pynvml.nvmlDeviceGetGpuFabricInfo(h, ctypes.byref(info))
        pynvml.nvmlDeviceGetPersistenceMode(h)
one()
w0, c0 = time.perf_counter(), time.process_time()
for _ in range(cycles):
    one()
w1, c1 = time.perf_counter(), time.process_time()
print(json.dumps({"wall": (w1 - w0) / cycles, "cpu": (c1 - c0) / cycles}))
"""


def proc_cpu(pid: int) -> float:
    """utime + stime of a process, seconds (proc(5): fields 14 and 15, in clock ticks)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(") ", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def self_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def measure_agent(env: Dict[str, str], cycles: int, with_checks: bool) -> Tuple[float, float]:
    client = NvmlClient(env=env, first_deadline_s=60)
    gpu_checks = [c for c in ALL_CHECKS if c.uses_gpus and not c.uses_kmsg]
    engine = Engine(gpu_checks)
    policy = ResolvedPolicy(load_policy(), "dra")
    pci = [{"slot": "x", "vendor": "10de", "class": "030200"}] * 8
    try:
        client.snapshot()  # first request: spawn + nvmlInit, not part of the steady state
        pid = client.worker_pid
        assert pid is not None
        w0, c0, p0 = time.perf_counter(), self_cpu(), proc_cpu(pid)
        for _ in range(cycles):
            snap = client.snapshot()
            assert snap["error"] is None and len(snap["gpus"]) == 8
            if with_checks:
                host = Host("/nonexistent-bench-root", gpus=StaticGpus(snap),
                            facts=StaticFacts({"pci_devices": pci}))
                engine.run(host, policy)
        w1, c1, p1 = time.perf_counter(), self_cpu(), proc_cpu(pid)
        assert client.worker_pid == pid, "the worker was respawned during the run"
    finally:
        client.close()
    return (w1 - w0) / cycles, ((c1 - c0) + (p1 - p0)) / cycles


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cycles", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        built = simlib.build(tmp / "lib")
        scenario = simlib.write_scenario(simlib.resolve("healthy-8xh100.json"), tmp / "s.json")
        env = simlib.worker_env(built, scenario)
        env.pop("LD_PRELOAD", None)  # the dlsym logger is a test aid, not part of the cost
        floor_out = subprocess.run([sys.executable, "-c", FLOOR, str(args.cycles)], env=env,
                                   capture_output=True, text=True, check=True, timeout=600)
        floor = json.loads(floor_out.stdout)
        snap_wall, snap_cpu = measure_agent(env, args.cycles, with_checks=False)
        full_wall, full_cpu = measure_agent(env, args.cycles, with_checks=True)
    ms = 1000.0
    print(f"NVML snapshot of 8 simulated H100s, {args.cycles} cycles each, Python {sys.version.split()[0]}")
    print(f"{'':34} {'wall ms/cycle':>14} {'CPU ms/cycle':>13} {'wall x floor':>13} {'CPU x floor':>12}")
    rows = [
        ("floor: direct pynvml, 1 process", floor["wall"], floor["cpu"]),
        ("agent: worker snapshot via pipe", snap_wall, snap_cpu),
        ("agent: snapshot + 10 GPU checks", full_wall, full_cpu),
    ]
    for name, wall, cpu in rows:
        print(f"{name:34} {wall * ms:14.3f} {cpu * ms:13.3f} {wall / floor['wall']:13.2f} "
              f"{cpu / floor['cpu']:12.2f}")


if __name__ == "__main__":
    main()
