"""Kernel-log lines (agent/xid/kmsg.py) and XIDs in them (agent/xid/events.py): every format parse_line
reads (/dev/kmsg records, dmesg, dmesg -r/-T, journalctl short-monotonic/short-iso, syslog),
raw /dev/kmsg reads, journal JSON, with hostile fields. These parsers have no error type: a
line that does not parse is all message, a record that does not parse is skipped and
counted, an XID line that does not parse is no XID. They must never raise."""
import json
from typing import Any, List

from hypothesis import strategies as st

from agent.snapshot import pci_key
from agent.xid.events import GpuMap, events_from_lines, parse_xid, recovered_pci
from agent.xid.journal import parse_journal_json
from agent.xid.kmsg import KernelLine, KmsgReader, parse_line, parse_record, render
from tests.fuzz.conftest import deep, expect, quick
from tests.fuzz.strategies import DIGITS, JSON, NASTY, SNAPSHOT, TEXT

HEX = st.text(st.sampled_from("0123456789abcdefABCDEF"), min_size=1, max_size=9)
PCI = st.one_of(
    st.builds(lambda d, b, s: f"{d}:{b}:{s}", HEX, HEX, HEX),
    st.builds(lambda d, b, s, f: f"PCI:{d}:{b}:{s}.{f}", HEX, HEX, HEX, DIGITS),
    NASTY,
)
XID_BODY = st.one_of(
    st.builds(lambda pci, code, rest: f"NVRM: Xid ({pci}): {code}{rest}", PCI, DIGITS,
              st.one_of(st.just(", pid=1234, name=python3, Ch 00000008"),
                        st.just(", pid='<unknown>', name=<unknown>, recovery action changed "
                                "from 0x1 (GPU Reset Required) to 0x0 (None)"),
                        NASTY)),
    st.builds(lambda pci, uuid: f"NVRM: GPU at PCI:{pci}: {uuid}", PCI,
              st.one_of(st.just("GPU-01000100-0000-0000-0000-000000000000"), NASTY)),
    NASTY,
)
MONTH = st.one_of(st.sampled_from(["Jan", "Feb", "Dec", "Xyz"]), NASTY)
PREFIX = st.one_of(
    st.builds(lambda p, s, t, f: f"{p},{s},{t},{f};", DIGITS, DIGITS, DIGITS,
              st.sampled_from(["-", "c", "-,caller=T1", ""])),
    st.builds(lambda s, f: f"[{s}.{f}] ", DIGITS, DIGITS),
    st.builds(lambda p, s, f: f"<{p}>[{s}.{f}] ", DIGITS, DIGITS, DIGITS),
    st.builds(lambda m, d, h, y: f"[Sun {m} {d} {h}:{h}:{h} {y}] ", MONTH, DIGITS,
              st.sampled_from(["00", "23", "99"]), DIGITS),
    st.builds(lambda y, z: f"{y}-13-45T25:61:61.{y}{z} host kernel: ", DIGITS,
              st.sampled_from(["", "Z", "+99:99", "-0530", "+٣٣:٣٣"])),
    st.builds(lambda y, z: f"{y}-02-30T12:00:00{z} host kernel: ",
              st.sampled_from(["0001", "9999", "2025"]), st.sampled_from(["+14:00", "-23:59"])),
    st.builds(lambda m, d: f"{m} {d} 12:33:30 host kernel: ", MONTH, DIGITS),
    st.builds(lambda s: f"[{s}] host kernel: ", DIGITS),
    st.just(""),
)
LINE = st.one_of(st.builds(lambda p, body: p + body, PREFIX, XID_BODY), TEXT, NASTY)
JOURNAL = st.lists(st.one_of(
    st.fixed_dictionaries({"MESSAGE": st.one_of(XID_BODY, st.lists(st.integers(-5, 300)), JSON)},
                          optional={"_SOURCE_MONOTONIC_TIMESTAMP": st.one_of(DIGITS, JSON),
                                    "__REALTIME_TIMESTAMP": st.one_of(DIGITS, JSON),
                                    "PRIORITY": st.one_of(DIGITS, JSON),
                                    "__CURSOR": JSON}).map(json.dumps),
    JSON.map(json.dumps), TEXT), max_size=4).map("\n".join)


class Chunks:
    """A /dev/kmsg-like device answering the fuzzed reads, then EAGAIN."""

    def __init__(self, chunks: List[Any]) -> None:
        self._chunks = list(chunks)

    def read(self, size: int) -> bytes:
        if not self._chunks:
            raise BlockingIOError
        chunk = self._chunks.pop(0)
        if chunk == "EPIPE":
            raise BrokenPipeError
        return chunk  # type: ignore[no-any-return]


def _encode(line: str) -> bytes:
    return line.encode("utf-8", "surrogatepass")


DEVICE = st.lists(st.one_of(LINE.map(lambda s: _encode(s + "\n")), st.binary(max_size=64),
                            st.just("EPIPE")), max_size=5)
CASES = st.tuples(st.lists(LINE, max_size=6), DEVICE, JOURNAL, SNAPSHOT)


def kernel_log(case: Any) -> None:
    lines, device, journal, snapshot = case
    for text in lines:
        rec = parse_line(text)
        expect(isinstance(rec, KernelLine), "parse_line returned", rec)
        expect(isinstance(parse_line(render(rec)), KernelLine), "render does not read back")
        ev = parse_xid(rec)
        if ev is not None:
            expect(isinstance(ev.code, int), "XID code is not an int", ev.code)
        recovered_pci(rec, ev)
        parse_record(_encode(text))
        pci_key(text)
    gpus = GpuMap(snapshot)
    events, resets = events_from_lines(lines, gpus)
    for ev in events:
        ev.label()
        ev.gpu()
    reader = KmsgReader(Chunks(device))
    for rec in reader:
        expect(isinstance(rec, KernelLine), "KmsgReader yielded", rec)
    recs, _cursor = parse_journal_json(journal)
    expect(all(isinstance(r, KernelLine) for r in recs), "journal lines")


test_kernel_log_quick = quick(CASES, kernel_log)
test_kernel_log_deep = deep("XID/kernel-log lines", CASES, kernel_log)
