"""A burst of 10,000 XID 13 records through the agent's own kernel-log reader, one record per
read as /dev/kmsg gives them, with one EPIPE (the ring buffer overran the reader): every record
is either counted as an XID or counted as lost, and memory stays bounded (bench/bench_kmsg.py
measures the same path and prints time and peak memory)."""

import tracemalloc

from agent.xid.kernel_source import DeviceSource
from agent.xid.monitor import XidMonitor
from agent.xid.state import StateStore
from checks.xid.policy import load_xid_policy
from tests.kmsg_double import BurstDevice

N = 10_000


def monitor(tmp_path, device):
    snap = {"gpus": [{"index": 1, "uuid": "GPU-1", "pci_bus_id": "00000000:2A:00.0"}]}
    mon = XidMonitor(StateStore(str(tmp_path), "boot-1"), load_xid_policy(), DeviceSource(device=device))
    mon.start()
    mon.gpus.update(snap)
    return mon


def test_every_record_of_a_burst_is_counted(tmp_path):
    mon = monitor(tmp_path, BurstDevice(N))
    tracemalloc.start()
    counted = mon.poll()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert counted == N
    assert mon.counter.counts() == {("1", 13): N}
    assert peak < 4 * 1024 * 1024, peak  # bounded: the dedupe window, not the burst
    assert mon.cycle(None)["faults"] == []  # XID 13 is restart-app: nothing sticky


def test_an_overrun_is_counted_as_lost_not_hidden(tmp_path):
    dev = BurstDevice(N, epipe_at=6000, drop=250)
    mon = monitor(tmp_path, dev)
    source = mon._source
    assert mon.poll() == N - 250
    assert source.reader.overruns == 1 and source.reader.lost == 250
    assert mon.counter.counts()[("1", 13)] + source.reader.lost == N


def test_memory_does_not_grow_with_the_burst(tmp_path):
    peaks = []
    for n in (1_000, 10_000):
        mon = monitor(tmp_path / str(n), BurstDevice(n))
        tracemalloc.start()
        assert mon.poll() == n
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    assert peaks[1] < peaks[0] * 2, peaks  # 10x the records, nowhere near 10x the memory
