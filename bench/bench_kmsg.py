"""A burst of XID 13 records through the agent's own kernel-log path (KmsgReader -> XidMonitor:
parse, resolve the GPU, de-duplicate, count), one record per read as /dev/kmsg gives them, with
one EPIPE, against two peers measured in the same run:

- floor: the same device double read in a bare loop (what the records cost to produce);
- regex scan: the whole burst as one dmesg text, scanned with one regex (what dmesg-scraping
  tools do; it keeps the whole text in memory and sees no EPIPE).

    python bench/bench_kmsg.py [--records 10000] [--runs 5]

Prints medians, ratios and peak memory (tracemalloc, in a separate pass so it does not skew
the times); never asserts.
"""

import argparse
import logging
import re
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.xid.kernel_source import DeviceSource  # noqa: E402
from agent.xid.monitor import XidMonitor  # noqa: E402
from agent.xid.state import StateStore  # noqa: E402
from checks.xid.policy import load_xid_policy  # noqa: E402
from tests.kmsg_double import XID13, BurstDevice  # noqa: E402


def agent_path(n, drop):
    mon = XidMonitor(StateStore(tempfile.mkdtemp(prefix="bench-kmsg-"), "b"), load_xid_policy(),
                     DeviceSource(device=BurstDevice(n, n // 2, drop)))
    mon.start()
    mon.gpus.update({"gpus": [{"index": 1, "uuid": "GPU-1", "pci_bus_id": "00000000:2A:00.0"}]})
    counted = mon.poll()
    lost = mon._source.reader.lost
    assert counted + lost == n, (counted, lost)
    return counted


def floor(n, drop):
    dev, got = BurstDevice(n, n // 2, drop), 0
    while True:
        try:
            dev.read(8192)
            got += 1
        except BrokenPipeError:
            continue
        except BlockingIOError:
            return got


def regex_scan(n, drop):
    text = "".join(f"[{i * 10e-6:12.6f}] {XID13.format(pid=4000 + i % 7)}\n" for i in range(1, n + 1))
    return len(re.findall(r"NVRM: Xid \(PCI:[^)]*\): (\d+),", text))


def timed(fn, n, drop, runs):
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn(n, drop)
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def peak(fn, n, drop):
    tracemalloc.start()
    fn(n, drop)
    top = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return top


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--drop", type=int, default=250, help="records the EPIPE overrun loses")
    args = ap.parse_args()
    logging.getLogger("gpu-node-agent").setLevel(logging.ERROR)  # the expected "records lost"
    n, drop = args.records, args.drop
    counted = agent_path(n, drop)
    print(f"records {n}, one EPIPE losing {drop}: counted {counted} + lost {drop} = {counted + drop}")
    rows = [("agent (reader+monitor)", agent_path), ("floor (bare reads)", floor),
            ("regex scan of dmesg text", regex_scan)]
    base = None
    for name, fn in rows:
        t = timed(fn, n, drop, args.runs)
        p = peak(fn, n, drop)
        base = base or t
        print(f"{name:28s} {t * 1000:9.1f} ms  {t / n * 1e6:7.1f} us/record  "
              f"peak {p / 1024:8.0f} KiB  agent time / this {base / t:5.2f}")
    big = peak(agent_path, n * 5, drop)
    print(f"agent peak at {n * 5} records: {big / 1024:.0f} KiB (bounded: does not grow with the burst)")


if __name__ == "__main__":
    main()
