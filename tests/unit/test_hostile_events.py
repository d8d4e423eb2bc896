"""Hostile input on the event paths added for event-driven verdicts and the one NVML worker:
the kernel log that never runs dry, NVML event lines with wrong types or absurd values, a
worker whose reply is not what the protocol says, a worker line past the cap, and a METADATA
file whose Version is not a version.

Expected values are written from the rules the code cites: /dev/kmsg returns one record per
read and EAGAIN when drained, EPIPE once per overrun (kernel Documentation/ABI/testing/
dev-kmsg); an XID code has at most 9 digits and an NVML index is an unsigned int (nvml.h);
names are cut to 80 characters like every snapshot string a verdict repeats
(checks/gpu/common.py gpu_ref); a version is PEP 440 text.
"""
import os
import stat
import sys
import textwrap
import time

import pytest

from agent import version as v
from agent.nvml import channel as channel_mod
from agent.nvml.channel import EOF, Channel
from agent.nvml.client import NvmlClient
from agent.xid import kmsg
from agent.xid.kernel_source import DeviceSource
from agent.xid.monitor import XidMonitor
from agent.xid.state import StateStore
from checks.xid.policy import load_xid_policy

RECORD = "3,{seq},{ts},-;NVRM: Xid (PCI:0000:2a:00): 13, pid=1, name=train, Graphics Exception\n"


class EndlessDevice:
    """A kernel log that never runs dry (a flood faster than the reader), or (``epipe``) one
    whose every read fails with EPIPE. Past ``fail_after`` reads it raises, so a reader with
    no bound fails this test instead of hanging it."""

    def __init__(self, epipe: bool = False, fail_after: int = 20_000) -> None:
        self.reads, self.epipe, self.fail_after = 0, epipe, fail_after

    def read(self, size: int) -> bytes:
        self.reads += 1
        if self.reads > self.fail_after:
            raise AssertionError("the reader kept reading a source that never runs dry")
        if self.epipe:
            raise BrokenPipeError(32, "Broken pipe")
        return RECORD.format(seq=self.reads, ts=1_000_000 + self.reads).encode()


def monitor(tmp_path, device):
    mon = XidMonitor(StateStore(str(tmp_path), "boot-1"), load_xid_policy(),
                     DeviceSource(device=device))
    mon.start()
    return mon


@pytest.mark.parametrize("epipe", [False, True])
def test_one_drain_of_a_kernel_log_that_never_runs_dry_ends(tmp_path, monkeypatch, epipe):
    """The watcher drains under the poll lock the cycle also takes: a drain that never ends
    would stall every cycle. Each drain reads at most MAX_READS_PER_POLL times."""
    monkeypatch.setattr(kmsg, "MAX_READS_PER_POLL", 500, raising=False)
    dev = EndlessDevice(epipe=epipe)
    mon = monitor(tmp_path, dev)
    first = mon.poll()
    assert dev.reads == 500
    assert first == (0 if epipe else 500)
    second = mon.poll()  # the next drain goes on where the first stopped
    assert dev.reads == 1000
    assert second == (0 if epipe else 500)


class BurstOf(EndlessDevice):
    """``n`` records, then EAGAIN (drained), as /dev/kmsg after a burst."""

    def __init__(self, n: int) -> None:
        super().__init__(fail_after=n + 1)
        self.n = n

    def read(self, size: int) -> bytes:
        if self.reads >= self.n:
            raise BlockingIOError(11, "EAGAIN")
        return super().read(size)


def test_a_burst_below_the_bound_is_still_drained_in_one_poll(tmp_path):
    """The bound is far above a full ring buffer (32 MiB of records of at least 32 bytes)."""
    assert kmsg.MAX_READS_PER_POLL >= (32 << 20) // 32
    assert monitor(tmp_path, BurstOf(3000)).poll() == 3000


# -- NVML event lines: whatever JSON a worker (or a library writing on its stdout) sends ------
def test_nvml_xid_fields_of_the_wrong_type_are_not_taken_as_given(tmp_path):
    mon = monitor(tmp_path, EndlessDevice(fail_after=0))
    mon.gpus.update({"gpus": [{"index": 0, "uuid": "GPU-a", "pci_bus_id": "00000000:2A:00.0"}]})
    hostile = [
        {"event": "xid", "code": 31, "index": 0, "mono_us": "soon"},  # not a number: now
        {"event": "xid", "code": 31, "index": 0, "mono_us": 10**30},  # not a u64: now
        {"event": "xid", "code": True, "index": 0},  # a JSON true is not code 1
        {"event": "xid", "code": 10**12, "index": 0},  # more digits than any XID
        {"event": "xid", "code": -5, "index": 0},
        {"event": "xid", "code": 43, "index": 10**40},  # not an NVML index: no label of it
        {"event": "xid", "code": 43, "index": -3},
        {"event": "xid", "code": 43, "index": "0\"\n"},
        {"event": "xid", "code": 45, "uuid": ["GPU-a"]},  # unhashable: must not raise
        {"event": "xid", "code": 45, "pci_bus_id": {"x": 1}},
        {"event": "xid", "code": 48, "uuid": "GPU-" + "u" * 100_000},
    ]
    for message in hostile:
        mon.on_nvml_message(message)  # the channel would log and drop what raises here
    counts = mon.counter.counts()
    assert counts[("0", 31)] == 2  # both counted, stamped with the agent's clock
    assert not [k for k in counts if k[1] in (1, 10**12, -5)]
    labels = {gpu for gpu, _ in counts}
    assert all(len(label) <= 80 and "\n" not in label for label in labels), labels
    assert counts[("unknown", 43)] == 3
    assert counts[("unknown", 45)] == 2
    assert counts[("GPU-" + "u" * 76, 48)] == 1  # cut to 80 characters


# -- a worker whose reply breaks the protocol ---------------------------------------------
def fake_worker(tmp_path, reply: str) -> str:
    """An executable standing in for the interpreter: whatever its arguments, it answers each
    request line with ``reply`` (its "id" filled in)."""
    script = tmp_path / "fake-python"
    body = textwrap.dedent(f"""\
        import json, sys
        for line in sys.stdin:
            req = json.loads(line)
            if req.get("op") == "exit":
                break
            out = json.loads({reply!r})
            out["id"] = req["id"]
            sys.stdout.write(json.dumps(out) + "\\n")
            sys.stdout.flush()
        """)
    script.write_text(f"#!{sys.executable}\n{body}")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


@pytest.mark.parametrize("snapshot", ['"garbage"', "[1, 2]", "7", "null"])
def test_a_snapshot_reply_that_is_not_an_object_is_an_error_snapshot(tmp_path, snapshot):
    python = fake_worker(tmp_path, '{"ok": true, "snapshot": ' + snapshot + "}")
    client = NvmlClient(deadline_s=5, first_deadline_s=5, python=python)
    try:
        snap = client.snapshot()  # documented never to raise
    finally:
        client.close()
    assert snap["error"]["kind"] == "worker_error"
    assert "not an object" in snap["error"]["message"]
    assert snap["gpus"] == []


# -- a worker line past the cap -------------------------------------------------------------
def test_the_tail_of_a_line_past_the_cap_is_not_taken_for_a_line(monkeypatch):
    """A line over MAX_LINE_BYTES is dropped whole: its last bytes, read in a later chunk,
    are not a message of their own (here they would be a valid reply)."""
    monkeypatch.setattr(channel_mod, "MAX_LINE_BYTES", 1024)
    read_end, write_end = os.pipe()
    channel = Channel(os.fdopen(read_end, "rb", buffering=0), None, {})
    try:
        os.write(write_end, b"x" * 4000)  # no newline yet: over the cap
        time.sleep(0.3)  # let the reader take it as a chunk of its own (a slow worker)
        os.write(write_end, b'{"id": 7, "ok": true}\n{"id": 8, "ok": true}\n')
        os.close(write_end)
        got = []
        while True:
            reply = channel.replies.get(timeout=5)
            if reply is EOF:
                break
            got.append(reply)
        assert got == [{"id": 8, "ok": True}]
    finally:
        channel.stop()


# -- METADATA: the Version header is input ------------------------------------------------
@pytest.mark.parametrize("value", ["1." + "9" * 300, "1.0 <script>", "1.0\x00", "1.0\u202e"])
def test_a_version_header_that_is_not_a_version_is_not_used(tmp_path, monkeypatch, value):
    dist = tmp_path / "gpu_node_agent-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: gpu-node-agent\nVersion: "
                                   f"{value}\n\nbody\n", encoding="utf-8")
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    assert v._from_metadata_file() is None


def test_a_pep440_version_is_read(tmp_path, monkeypatch):
    dist = tmp_path / "gpu_node_agent-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nVersion: 1!2.0.post3.dev4+g1a2b.c\n\n")
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    assert v._from_metadata_file() == "1!2.0.post3.dev4+g1a2b.c"


# -- the kernel-log watcher: a drain that always fails ----------------------------------------
def test_a_watcher_that_gave_up_is_not_started_again_at_the_next_tick(monkeypatch):
    """After MAX_FAILURES failed drains in a row the watcher leaves the kernel log to the
    cycles; the daemon loop calls _watch_kernel every tick (5 s), which must not start a new
    watcher for it, or the give-up is undone and the errors go on forever."""
    import logging
    import threading
    import types

    from agent.daemon import triggers

    monkeypatch.setattr(triggers, "WATCH_WAIT_S", 0.01)  # the back-off, shortened
    r, w = os.pipe()
    os.write(w, b"x")  # readable for good
    calls = []

    def broken() -> None:
        calls.append(1)
        raise OSError(22, "Invalid argument")  # EINVAL: what a too-small read buffer gets

    class Hooks(triggers.EventHooks):
        def __init__(self) -> None:
            run = types.SimpleNamespace(event_driven=True)
            self.gen = types.SimpleNamespace(config=types.SimpleNamespace(run=run))
            self.log = logging.getLogger("test-hostile-events")
            self.clock = types.SimpleNamespace(monotonic=time.monotonic)
            self.checks = []
            self.wake = threading.Event()
            self.stop_event = threading.Event()
            self.xid_monitor = types.SimpleNamespace(kernel_fd=lambda: r, poll=broken)
            self._hook_events()

    hooks = Hooks()
    try:
        hooks._watch_kernel()
        first = hooks._kwatch
        assert first is not None
        first.thread.join(20)
        assert not first.alive()
        for _ in range(3):  # three ticks of the daemon loop
            hooks._watch_kernel()
            if hooks._kwatch is not first:
                hooks._kwatch.thread.join(20)
        assert len(calls) == triggers.MAX_FAILURES
    finally:
        hooks.stop_event.set()
        os.close(r)
        os.close(w)


def test_an_nvml_error_line_of_a_megabyte_is_logged_cut(tmp_path, caplog):
    mon = monitor(tmp_path, EndlessDevice(fail_after=0))
    huge = "z" * 1_000_000
    with caplog.at_level("WARNING", logger="gpu-node-agent"):
        mon.on_nvml_message({"event": "error", "kind": huge, "nvml_code": [huge],
                             "message": huge})
    fields = [r.fields for r in caplog.records if r.getMessage() == "NVML event wait failed"]
    assert len(fields) == 1
    assert all(len(str(value)) <= 300 for value in fields[0].values()), {
        k: len(str(v)) for k, v in fields[0].items()}


def test_a_flood_of_replies_nobody_asked_for_is_not_kept_without_bound():
    """A worker (or a library writing JSON on its stdout) that sends reply lines between
    requests: the client waits for one reply at a time, so the queue keeps a few, not all;
    the end of the stream is still seen."""
    read_end, write_end = os.pipe()
    channel = Channel(os.fdopen(read_end, "rb", buffering=0), None, {})
    try:
        line = b'{"id": 1, "ok": true}\n'
        for _ in range(100):
            os.write(write_end, line * 100)  # 10,000 replies in all
        os.close(write_end)
        assert channel.ended.wait(10)
        size = channel.replies.qsize()
        assert size <= channel_mod.MAX_REPLIES + 1, size
        got = [channel.replies.get_nowait() for _ in range(size)]
        assert got[-1] is EOF
    finally:
        channel.stop()


class FailingDevice:
    """/dev/kmsg whose every read fails (EINVAL: read(2) with a buffer too small for the
    record, kernel Documentation/ABI/testing/dev-kmsg)."""

    def read(self, size: int) -> bytes:
        raise OSError(22, "Invalid argument")


def test_a_kernel_log_that_fails_every_read_does_not_hold_back_nvml_faults(tmp_path):
    """XID 79 (fallen off the bus: sticky) arrives from NVML while the kernel log cannot be
    read: the cycle still records it, so gpu-xid sees it; the read error is still raised (the
    daemon logs it)."""
    mon = monitor(tmp_path, FailingDevice())
    snap = {"gpus": [{"index": 0, "uuid": "GPU-a", "pci_bus_id": "00000000:2A:00.0"}]}
    mon.on_nvml_message({"event": "xid", "code": 79, "index": 0, "uuid": "GPU-a",
                         "pci_bus_id": "00000000:2A:00.0", "mono_us": 5_000_000})
    with pytest.raises(OSError):
        mon.cycle(snap)
    faults = (mon.view() or {}).get("faults") or []
    assert [(f["code"], f["source"]) for f in faults] == [(79, "nvml")]


# -- found fine, pinned --------------------------------------------------------------------
def test_a_worker_that_dies_mid_event_line_leaves_no_half_event():
    read_end, write_end = os.pipe()
    seen = []
    channel = Channel(os.fdopen(read_end, "rb", buffering=0), seen.append,
                      {"events": 0, "errors": 0, "gpu_lost": 0})
    try:
        os.write(write_end, b'{"event": "xid", "code": 79, "index": 0}\n{"event": "xid", "co')
        os.close(write_end)  # killed in the middle of its second line
        assert channel.replies.get(timeout=5) is EOF
        assert seen == [{"event": "xid", "code": 79, "index": 0}]
    finally:
        channel.stop()


def test_the_nudge_never_signals_a_reaped_worker_pid(tmp_path, monkeypatch):
    """SIGURG goes through Popen.send_signal, which polls first and sends nothing once the
    child is reaped (CPython bpo-38630, 3.9+), so a PID reused by another process after the
    worker died is never signalled."""
    import io
    import subprocess

    python = fake_worker(tmp_path, '{"ok": true}')
    client = NvmlClient(deadline_s=5, first_deadline_s=5, python=python)
    try:
        client._sink = lambda message: None  # events wanted: each request is nudged
        assert client._spawn() is None
        proc = client._proc
        proc.stdin.close()
        proc.wait(5)  # exited and reaped: its PID is free for reuse
        proc.stdin = io.BytesIO()  # the write itself succeeds (a pipe buffer would)
        killed = []
        monkeypatch.setattr(os, "kill", lambda pid, sig: killed.append((pid, sig)))
        client._send({"op": "ping"})
        assert killed == []
        assert isinstance(proc, subprocess.Popen)
    finally:
        monkeypatch.undo()
        client.close()


def test_an_xid_storm_wakes_the_daemon_loop_once_per_evaluation():
    """Events that arrive while an evaluation is pending join it and do not move its time
    (triggers.py: coalescing, one per second at most), so waking the loop for each of them
    only spins it: one wake per pending evaluation."""
    import threading
    import types

    from agent.daemon import triggers

    class CountingWake:
        def __init__(self) -> None:
            self.sets = 0

        def set(self) -> None:
            self.sets += 1

    now = [100.0]

    class Hooks(triggers.EventHooks):
        def __init__(self) -> None:
            run = types.SimpleNamespace(event_driven=True)
            self.gen = types.SimpleNamespace(config=types.SimpleNamespace(run=run))
            self.clock = types.SimpleNamespace(monotonic=lambda: now[0])
            self.checks = []
            self.wake = CountingWake()
            self.stop_event = threading.Event()
            self.xid_monitor = None
            self._hook_events()

    hooks = Hooks()
    for _ in range(10_000):
        hooks.event_seen()
    assert hooks.wake.sets == 1
    assert hooks.events.notices == 10_000
    assert hooks.events.take(now[0])  # the loop runs the evaluation
    now[0] += 0.5
    hooks.event_seen()  # a new event after it: pending again, due at 101.0
    assert hooks.wake.sets == 2
    assert hooks.events.due_at() == 101.0


def test_a_deeply_nested_line_does_not_end_the_reader():
    """json.loads raises RecursionError, not ValueError, on nesting past the interpreter's
    limit: one such line from the worker must be dropped like any other bad line, not end
    the reader (whose EOF the supervisor would take for a dead or hung worker)."""
    read_end, write_end = os.pipe()
    channel = Channel(os.fdopen(read_end, "rb", buffering=0), None, {})
    try:
        os.write(write_end, b"[" * 100_000 + b"\n" + b'{"id": 3, "ok": true}\n')
        assert channel.replies.get(timeout=5) == {"id": 3, "ok": True}
        assert not channel.ended.is_set()
    finally:
        os.close(write_end)
        channel.stop()


def test_a_long_line_in_many_reads_is_one_message():
    """A snapshot of many GPUs arrives in many reads (a pipe holds 64 KiB): it is routed once,
    whole, between the lines around it."""
    read_end, write_end = os.pipe()
    channel = Channel(os.fdopen(read_end, "rb", buffering=0), None, {})
    big = '{"id": 2, "ok": true, "pad": "' + "p" * 3_000_000 + '"}\n'
    data = b'{"id": 1, "ok": true}\n' + big.encode() + b'{"id": 3, "ok": true}\n'

    def writer() -> None:
        for i in range(0, len(data), 65536):
            os.write(write_end, data[i:i + 65536])
        os.close(write_end)

    import threading

    t = threading.Thread(target=writer)
    t.start()
    try:
        got = [channel.replies.get(timeout=10) for _ in range(4)]
        assert [g and g["id"] for g in got] == [1, 2, 3, None]
        assert len(got[1]["pad"]) == 3_000_000
    finally:
        t.join(10)
        channel.stop()


# -- a flood of XIDs on GPUs and codes that do not exist --------------------------------------
def test_a_flood_of_distinct_gpus_and_codes_keeps_the_counter_and_dedupe_bounded():
    """An index below 2**32 and a code of 9 digits are each valid, so a library (or a worker)
    sending distinct ones could grow one counter series and one dedupe queue per pair
    without bound. Past MAX_PAIRS new pairs are not counted (their total is), and the dedupe
    forgets its oldest pairs first."""
    from agent.xid.events import MAX_PAIRS, Deduper, XidCounter, XidEvent

    counter = XidCounter()
    for i in range(MAX_PAIRS + 904):
        counter.record(str(i), 31)
    counter.record("0", 31)  # a pair it has: still counted
    counts = counter.counts()
    assert len(counts) == MAX_PAIRS and counts[("0", 31)] == 2
    assert counter.dropped == 904
    dedupe = Deduper(5.0)
    for i in range(MAX_PAIRS + 904):
        dedupe.is_duplicate(XidEvent(code=i, pci="0000:2a:00", source="nvml", mono_us=i))
    assert len(dedupe._recent) == MAX_PAIRS
    # the newest pairs are the ones kept: a kernel-log report of the last one still matches
    last = MAX_PAIRS + 903
    assert dedupe.is_duplicate(XidEvent(code=last, pci="0000:2a:00", source="kmsg", mono_us=last))
