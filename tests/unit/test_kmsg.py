"""The kernel-log reader and line parsers (agent/xid/kmsg.py, agent/xid/journal.py,
agent/xid/kernel_source.py).

Record format facts come from the kernel's Documentation/ABI/testing/dev-kmsg: one record per
read, ``pri,seq,ts_usec,flags;message``, dictionary lines start with a space, non-printable
bytes are ``\\xNN``, EPIPE when the ring buffer overran the reader, EAGAIN at the end.
"""

import json
import os
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.hostview import CommandResult
from agent.xid.journal import parse_journal_json, read_journal_lines
from agent.xid.kernel_source import DeviceSource, JournalSource
from agent.xid.kmsg import MAX_PENDING, KmsgReader, parse_line, parse_record, render


class Device:
    """A /dev/kmsg double: one record per read(), EPIPE where told, EAGAIN at the end."""

    def __init__(self, records, epipe_before=None, drop=0):
        self.records = list(records)
        self.pos = 0
        self.epipe_before = epipe_before
        self.drop = drop

    def read(self, size):
        if self.epipe_before is not None and self.pos == self.epipe_before:
            self.epipe_before = None
            self.pos += self.drop  # what the ring buffer overwrote
            raise BrokenPipeError(32, "Broken pipe")
        if self.pos >= len(self.records):
            raise BlockingIOError(11, "Resource temporarily unavailable")
        rec = self.records[self.pos]
        self.pos += 1
        assert len(rec) <= size
        return rec


def rec(seq, ts, msg, pri=3, dict_lines=b""):
    return f"{pri},{seq},{ts},-;{msg}\n".encode() + dict_lines


def test_parse_record_fields_and_escapes():
    line = parse_record(b"6,1234,5678901,-;NVRM: Xid (PCI:0000:9b:00): 119, caf\\xc3\\xa9 \\x5c")
    assert (line.priority, line.seq, line.mono_us) == (6, 1234, 5678901)
    assert line.message == "NVRM: Xid (PCI:0000:9b:00): 119, caf\u00e9 \\"


def test_parse_record_facility_bits_and_extra_prefix_fields():
    # pri is facility*8 + level; newer kernels add fields after flags (caller id).
    line = parse_record(b"27,7,100,c,caller=T123;hello")
    assert (line.priority, line.seq, line.message) == (3, 7, "hello")


@pytest.mark.parametrize("bad", [b"no separator", b"x,1,2,-;m", b"1,2;m"])
def test_parse_record_rejects_malformed(bad):
    assert parse_record(bad) is None


def test_reader_one_record_per_read_skips_dictionary_lines():
    dev = Device([rec(1, 10, "a", dict_lines=b" SUBSYSTEM=pci\n DEVICE=+pci:0000:9b:00.0\n"),
                  rec(2, 20, "b")])
    reader = KmsgReader(dev)
    assert [r.message for r in reader] == ["a", "b"]
    assert (reader.records, reader.lost, reader.overruns, reader.skipped) == (2, 0, 0, 0)


def test_reader_counts_records_lost_to_an_overrun():
    dev = Device([rec(i, i * 10, f"m{i}") for i in range(1, 101)], epipe_before=40, drop=7)
    reader = KmsgReader(dev)
    got = [r.seq for r in reader]
    assert reader.overruns == 1 and reader.lost == 7
    assert len(got) == 93 and got[39] == 40 and got[40] == 48


def test_reader_continues_after_eagain_and_ignores_replayed_seqs():
    dev = Device([rec(1, 1, "a"), rec(2, 2, "b")])
    reader = KmsgReader(dev)
    assert [r.seq for r in reader] == [1, 2]
    dev.records += [rec(2, 2, "b"), rec(3, 3, "c")]  # a reopened device replays
    assert [r.seq for r in reader] == [3]


def test_reader_takes_streams_with_several_or_partial_records_per_read():
    data = b"".join(rec(i, i, f"m{i}") for i in range(1, 6))
    chunks = [data[i:i + 7] for i in range(0, len(data), 7)]

    class Stream:
        def read(self, size):
            return chunks.pop(0) if chunks else b""

    reader = KmsgReader(Stream())
    assert [r.message for r in reader] == [f"m{i}" for i in range(1, 6)]
    assert reader.eof


def test_reader_bounds_a_line_that_never_ends():
    chunks = [b"x" * 8192] * ((MAX_PENDING // 8192) + 2) + [b"\n" + rec(1, 1, "ok")]

    class Stream:
        def read(self, size):
            return chunks.pop(0) if chunks else b""

    reader = KmsgReader(Stream())
    assert [r.message for r in reader] == ["ok"]
    assert reader.skipped >= 1


def test_real_fifo_through_device_source(tmp_path):
    fifo = tmp_path / "kmsg.fifo"
    os.mkfifo(fifo)
    src = DeviceSource(str(fifo))  # non-blocking open of the read end works without a writer
    try:
        wfd = os.open(fifo, os.O_WRONLY)
        os.write(wfd, rec(1, 5, "NVRM: Xid (PCI:0000:18:00): 13, x") + rec(2, 6, "usb 1-1: hi"))
        assert [render(r) for r in src.poll()] == ["3,1,5,-;NVRM: Xid (PCI:0000:18:00): 13, x"]
        os.write(wfd, rec(3, 7, "NVRM: Xid (PCI:0000:18:00): 31, y"))
        assert [r.seq for r in src.poll()] == [3]
        os.close(wfd)
    finally:
        src.close()


EXPECTED = "NVRM: Xid (PCI:0000:65:00): 79, GPU has fallen off the bus."


@pytest.mark.parametrize(
    "line, mono_us, has_wall",
    [
        (f"[  123.456789] {EXPECTED}", 123456789, False),  # dmesg
        (f"<3>[  123.456789] {EXPECTED}", 123456789, False),  # dmesg -r
        (f"[  123.456789] gpu-host-1 kernel: {EXPECTED}", 123456789, False),  # short-monotonic
        (f"[Sun Feb 23 16:24:18 2025] {EXPECTED}", None, True),  # dmesg -T
        (f"Mar 26 12:33:30 gpu-host-1 kernel: {EXPECTED}", None, True),  # syslog
        (f"2025-02-23T16:24:18.123456+0000 gpu-host-1 kernel: {EXPECTED}", None, True),  # short-iso
        (f"3,55,123456789,-;{EXPECTED}", 123456789, False),  # /dev/kmsg record
        (EXPECTED, None, False),  # bare
    ],
)
def test_parse_line_formats(line, mono_us, has_wall):
    got = parse_line(line)
    assert got.message == EXPECTED
    assert got.mono_us == mono_us
    assert (got.wall is not None) == has_wall


def test_dmesg_ctime_is_local_time():
    got = parse_line("[Sun Feb 23 16:24:18 2025] x")
    assert time.localtime(got.wall)[:6] == (2025, 2, 23, 16, 24, 18)


def test_render_round_trips():
    for text in ("3,9,1000001,-;NVRM: a", "[    1.000001] NVRM: b"):
        assert render(parse_line(text)) == text


def journal_entry(message, mono=None, cursor="c1"):
    entry = {"__CURSOR": cursor, "MESSAGE": message, "PRIORITY": "3",
             "__REALTIME_TIMESTAMP": "1740327858000000", "__MONOTONIC_TIMESTAMP": "99000000"}
    if mono is not None:
        entry["_SOURCE_MONOTONIC_TIMESTAMP"] = str(mono)
    return json.dumps(entry)


def test_journal_json_prefers_the_kernels_own_timestamp_and_decodes_byte_arrays():
    raw = list("NVRM: Xid (PCI:0000:18:00): 13, caf\u00e9".encode())
    text = "\n".join([journal_entry("NVRM: Xid (PCI:0000:18:00): 31, x", 5_000_000, "c1"),
                      journal_entry("e1000e: link up", 6_000_000, "c2"),
                      journal_entry(raw, None, "c3"), "not json"])
    lines, cursor = parse_journal_json(text)
    assert [x.message for x in lines] == ["NVRM: Xid (PCI:0000:18:00): 31, x",
                                          "NVRM: Xid (PCI:0000:18:00): 13, caf\u00e9"]
    assert [x.mono_us for x in lines] == [5_000_000, 99_000_000]
    assert cursor == "c3"


def test_journal_source_continues_after_the_cursor():
    calls = []

    def run(argv, timeout):
        calls.append(list(argv))
        n = len(calls)
        return CommandResult(tuple(argv), 0, journal_entry(f"NVRM: Xid (PCI:0000:18:00): 13, {n}", n, f"k{n}"))

    src = JournalSource(run)
    assert len(list(src.poll())) == 1 and len(list(src.poll())) == 1
    assert calls[0][:3] == ["journalctl", "-k", "-b"] and "--after-cursor=k1" in calls[1]


def test_journal_unavailable_is_none():
    def run(argv, timeout):
        return CommandResult(tuple(argv), 127, "", "journalctl: command not found")

    assert read_journal_lines(run) is None



@settings(max_examples=200, deadline=None)
@given(msgs=st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), max_size=60),
                     max_size=30),
       cuts=st.lists(st.integers(min_value=1, max_value=50), max_size=40))
def test_records_survive_any_split_of_the_stream(msgs, cuts):
    # The kernel escapes a backslash in a message as \x5c (dev-kmsg ABI); the reader undoes it.
    data = b"".join(rec(i + 1, i, m.replace("\\", "\\x5c")) for i, m in enumerate(msgs))
    chunks, pos = [], 0
    for c in cuts:
        chunks.append(data[pos:pos + c])
        pos += c
    chunks.append(data[pos:])

    class Stream:
        def read(self, size):
            return chunks.pop(0) if chunks else b""

    got = list(KmsgReader(Stream()))
    assert [r.seq for r in got] == list(range(1, len(msgs) + 1))
    assert [r.message for r in got] == msgs


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_parse_line_never_raises(text):
    line = parse_line(text)
    assert isinstance(line.message, str)
