"""One-shot `gpu-node-agent check` on a fixture host, against the interpreter's own start-up
(the floor: `python -c pass`) measured in the same run, plus the CLI's import time.

    python bench/bench_check.py [--runs 15] [--bundle tests/fixtures/bundles/host-foundation-only]

Prints medians and ratios; never asserts a time (a figure is read beside its ratio, never alone).
"""
import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def wall(argv, runs):
    samples = []
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=REPO)
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples), max(samples)


def import_time_ms(module):
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"],
                          capture_output=True, text=True, cwd=REPO)
    for line in proc.stderr.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) == 3 and parts[2] == module:
            return int(parts[1]) / 1000
    return float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--bundle", default=str(REPO / "tests/fixtures/bundles/host-foundation-only"))
    args = ap.parse_args()
    floor, _ = wall([sys.executable, "-c", "pass"], args.runs)
    check, worst = wall([sys.executable, "-m", "agent.cli", "check", "--bundle", args.bundle], args.runs)
    check_json, _ = wall([sys.executable, "-m", "agent.cli", "check", "--bundle", args.bundle,
                          "--format", "json"], args.runs)
    version, _ = wall([sys.executable, "-m", "agent.cli", "version"], args.runs)
    print(f"python {sys.version.split()[0]}, {args.runs} runs each, medians")
    print(f"  interpreter floor (python -c pass): {floor * 1000:7.1f} ms")
    print(f"  gpu-node-agent version:             {version * 1000:7.1f} ms  ({version / floor:.1f}x floor)")
    print(f"  check --bundle (text):              {check * 1000:7.1f} ms  ({check / floor:.1f}x floor, worst {worst * 1000:.1f} ms)")
    print(f"  check --bundle --format json:       {check_json * 1000:7.1f} ms  ({check_json / floor:.1f}x floor)")
    print(f"  import agent.cli:                   {import_time_ms('agent.cli'):7.1f} ms (cumulative, -X importtime)")
    print(f"  import checks.registry:             {import_time_ms('checks.registry'):7.1f} ms")


if __name__ == "__main__":
    main()
