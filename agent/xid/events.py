"""XIDs: kernel-log lines and NVML events, de-duplicated, counted, and recorded as sticky faults.

For the daemon (agent/daemon/service.py) and the metrics (agent/outputs/metrics.py),
agent/xid/monitor.py:

    monitor = xid_monitor.start_for_daemon(config, policy.policy.xid)  # state, kmsg, NVML events
    monitor.cycle(snapshot)        # each cycle: new kernel records, sticky faults, resets, ECC
    monitor.counter.counts()       # {(gpu, code): n}; gpu = the index as a string, or the
                                   # PCI key "0000:9b:00" when no snapshot names the GPU
    monitor.stop()

Counters are monotonic within a process (Prometheus counters); after a restart the kernel log
is read again since boot, so they start at "XIDs this boot that the ring buffer still holds".

Line format (NVIDIA XID docs, "Viewing Xid Error Messages"): ``NVRM: Xid (PCI:0000:9b:00): 119,
pid=..., name=..., <text>``; old drivers print ``NVRM: Xid (0000:03:00): 14, ...``. One kernel
record is one XID: a burst of 10,000 records is 10,000 XIDs. The same XID reported by NVML and
by the kernel log (same GPU and code within ``dedupe_window_s``) is one XID.
"""

import collections
import re
import threading
from typing import Any, Deque, Dict, List, Mapping, Optional, Sequence, Tuple

from agent.records import record
from agent.snapshot import pci_key
from agent.xid.kmsg import KernelLine, parse_line

_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.[0-7])?\):"
    r"\s*(?P<code>[0-9]+)(?P<rest>.*)$"
)
# XID codes are small (NVIDIA's catalog ends in the low hundreds); a longer number is not an
# XID, and int() of one past 4,300 digits raises on Python >= 3.11.
_CODE_DIGITS = 9
# NVML indices are unsigned ints (nvml.h).
_INDEX_LIMIT = 2**32
# (GPU, XID) pairs kept by the counter and the dedupe: a host has at most a few hundred (GPUs
# times the codes NVIDIA's XID catalogue lists), so a flood of distinct ones (a broken library,
# a forged line) is what reaches this, not a real host.
MAX_PAIRS = 4096
_PID = re.compile(r"pid='?([^,']*)'?")
_NAME = re.compile(r"name=([^,]*)")
# XID 154 reports the driver's recovery action; "to 0x0 (None)" = nothing left to do, i.e.
# the reset the GPU needed has happened (NVIDIA XID catalog, code 154).
_RECOVERED = re.compile(r"recovery action changed from .* to 0x0 \(None\)")
_GPU_AT = re.compile(r"NVRM: GPU at PCI:([0-9A-Fa-f:]+): (GPU-[0-9A-Fa-f-]+)")


@record
class XidEvent:
    """One XID as a source reported it (kernel log or NVML), with the GPU it names."""

    code: int
    pci: Optional[str]
    source: str = "kmsg"  # kmsg | nvml
    mono_us: Optional[int] = None
    wall: Optional[float] = None
    seq: Optional[int] = None
    message: str = ""
    pid: Optional[str] = None
    name: Optional[str] = None
    index: Optional[int] = None
    uuid: Optional[str] = None

    def gpu(self) -> Dict[str, Any]:
        return {"pci": self.pci, "index": self.index, "uuid": self.uuid}

    def label(self) -> str:
        return str(self.index) if self.index is not None else (self.pci or self.uuid or "unknown")


def parse_xid(line: KernelLine) -> Optional[XidEvent]:
    m = _XID.search(line.message)
    if not m or len(m.group("code")) > _CODE_DIGITS:
        return None
    rest = m.group("rest")
    pid, name = _PID.search(rest), _NAME.search(rest)
    return XidEvent(
        code=int(m.group("code")),
        pci=pci_key(m.group("pci")),
        source="kmsg",
        mono_us=line.mono_us,
        wall=line.wall,
        seq=line.seq,
        message=line.message[m.start() :][:300],
        pid=pid.group(1).strip() if pid else None,
        name=name.group(1).strip() if name else None,
    )


def recovered_pci(line: KernelLine, ev: Optional[XidEvent] = None) -> Optional[str]:
    """The GPU whose XID 154 says no recovery action is left (a reset happened)."""
    ev = ev if ev is not None else parse_xid(line)
    if ev is not None and ev.code == 154 and _RECOVERED.search(line.message):
        return ev.pci
    return None


class GpuMap:
    """PCI key -> {index, uuid}, from GPU snapshots and the kernel's 'GPU at PCI:' lines.
    Kept across cycles: a GPU that fell off the bus is no longer in the snapshot."""

    def __init__(self, snapshot: Optional[Mapping[str, Any]] = None) -> None:
        self.by_pci: Dict[str, Dict[str, Any]] = {}
        if snapshot is not None:
            self.update(snapshot)

    def update(self, snapshot: Optional[Mapping[str, Any]]) -> None:
        gpus = snapshot.get("gpus") if isinstance(snapshot, Mapping) else None
        for gpu in gpus if isinstance(gpus, list) else ():
            key = pci_key(gpu.get("pci_bus_id")) if isinstance(gpu, Mapping) else None
            if key:
                # Only what the snapshot schema allows (docs/gpu-snapshot.md): an index that
                # is not an NVML index or a uuid that is not text would end up in labels.
                index, uuid = gpu.get("index"), gpu.get("uuid")
                ok_index = (isinstance(index, int) and not isinstance(index, bool)
                            and 0 <= index < _INDEX_LIMIT)
                self.by_pci[key] = {"index": index if ok_index else None,
                                    "uuid": uuid if isinstance(uuid, str) else None}

    def learn(self, line: KernelLine) -> None:
        m = _GPU_AT.search(line.message)
        if m and pci_key(m.group(1)):
            self.by_pci.setdefault(str(pci_key(m.group(1))), {}).setdefault("uuid", m.group(2))

    def pci_of(self, index: Any = None, uuid: Any = None) -> Optional[str]:
        for key, gpu in self.by_pci.items():
            if (index is not None and gpu.get("index") == index) or (
                uuid and gpu.get("uuid") == uuid
            ):
                return key
        return None

    def resolve(self, ev: XidEvent) -> XidEvent:
        """Fills in what the map knows (in place: events are fresh per line)."""
        if ev.pci is None:
            ev.pci = self.pci_of(ev.index, ev.uuid)
        known = self.by_pci.get(ev.pci or "")
        if known:
            if ev.index is None:
                ev.index = known.get("index")
            if ev.uuid is None:
                ev.uuid = known.get("uuid")
        return ev


def events_from_lines(
    lines: Sequence[str], gpus: Optional[GpuMap] = None
) -> Tuple[List[XidEvent], List[Tuple[str, KernelLine]]]:
    """XIDs in kernel-log text lines (any format kmsg.parse_line reads), exact duplicates
    (same record seen twice) dropped; plus the observed resets as (pci, line)."""
    gpus = gpus or GpuMap()
    parsed = [parse_line(text) for text in lines]
    for line in parsed:
        gpus.learn(line)
    seen = set()
    events, resets = [], []
    for line in parsed:
        ev = parse_xid(line)
        if ev is None:
            continue
        ident = (
            ("seq", ev.seq)
            if ev.seq is not None
            else (ev.pci, ev.code, ev.mono_us, ev.wall, ev.message)
        )
        if ident in seen:
            continue
        seen.add(ident)
        pci = recovered_pci(line, ev)
        if pci:
            resets.append((pci, line))
        events.append(gpus.resolve(ev))
    return events, resets


class XidCounter:
    """XIDs per (gpu, code), for the metrics: counters, never last-value gauges."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Dict[Tuple[str, int], int] = collections.Counter()
        self.dropped = 0  # XIDs of pairs past MAX_PAIRS, not exported

    def record(self, gpu: str, code: int, n: int = 1) -> None:
        with self._lock:
            if (gpu, code) not in self._counts and len(self._counts) >= MAX_PAIRS:
                self.dropped += n
                return
            self._counts[(gpu, code)] += n

    def counts(self) -> Dict[Tuple[str, int], int]:
        with self._lock:
            return dict(self._counts)


class Deduper:
    """One XID seen by both NVML and the kernel log counts once: an event is a duplicate when
    the *other* source reported the same GPU and code within the window and that report has
    not already been matched (1:1). O(1) per event; memory: ``per_key`` recent reports per
    (GPU, code, source), so a burst of any size costs the same."""

    def __init__(self, window_s: float, per_key: int = 256) -> None:
        self.window_us = int(window_s * 1_000_000)
        self.per_key = per_key
        self._recent: Dict[Tuple[str, int, str], Deque[int]] = {}

    def is_duplicate(self, ev: XidEvent) -> bool:
        if ev.mono_us is None or self.window_us <= 0:
            return False
        gpu = ev.pci or ev.uuid or str(ev.index)
        other_source = "nvml" if ev.source == "kmsg" else "kmsg"
        other = self._recent.get((gpu, ev.code, other_source))
        while other and other[0] < ev.mono_us - self.window_us:
            other.popleft()  # too old to be this XID
        if other and abs(other[0] - ev.mono_us) <= self.window_us:
            other.popleft()
            return True
        key = (gpu, ev.code, ev.source)
        if key not in self._recent and len(self._recent) >= MAX_PAIRS:
            del self._recent[next(iter(self._recent))]  # the oldest pair: O(1), dicts keep order
        mine = self._recent.setdefault(key, collections.deque(maxlen=self.per_key))
        mine.append(ev.mono_us)
        return False
