"""The daemon's XID side: kernel log + NVML events -> counters and the sticky-fault store.

Usage: agent/xid/events.py's header and docs/xid.md. No entry point of its own: `run` builds
it through ``start_for_daemon`` with the XID policy the command line (the one composition
root) hands it; the restart tests drive it from tests/xid_recorder.py.
"""

import contextlib
import copy
import logging
import threading
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from agent.snapshot import pci_key
from agent.xid.events import (
    Deduper,
    GpuMap,
    XidCounter,
    XidEvent,
    parse_xid,
    recovered_pci,
)
from agent.xid.faults import ecc_fault, ecc_readings, fault_record
from agent.xid.kmsg import KernelLine, parse_line
from agent.xid.state import StateStore, add_clear, add_fault, empty_state, monotonic_us

log = logging.getLogger("gpu-node-agent").getChild("xid")
ERROR_EVENT_S = 60  # at most one event-driven evaluation per this many s from NVML wait errors


class XidMonitor:
    """The daemon's side: kernel log + NVML events -> counters and the sticky-fault store."""

    def __init__(self, store: StateStore, policy: Any, source: Any = None, run: Any = None) -> None:
        self.store = store
        self.policy = policy
        self.counter = XidCounter()
        self.gpus = GpuMap()
        self._source = source
        self._run = run
        self._dedupe = Deduper(float(getattr(policy, "dedupe_window_s", 5.0)))
        self._lock = threading.Lock()
        # (gpu, code) -> (latest event, how many): bounded by GPUs x codes, not by the burst
        self._pending: Dict[Tuple[str, int], Tuple[XidEvent, XidEvent, int]] = {}
        self._resets: List[Tuple[str, Optional[int]]] = []
        self.state: Dict[str, Any] = {}  # what the checks see: the file plus anything unsaved
        self._saved: Optional[Dict[str, Any]] = None  # the file as last read or written
        # Recorded, not yet written (read-only or full state dir): shown to the checks at once.
        self._unsaved_faults: List[Dict[str, Any]] = []
        self._unsaved_resets: List[Tuple[str, Optional[int]]] = []
        self._unsaved_seen: Dict[str, int] = {}
        self.write_failures = 0
        # The NVML client whose one worker also waits for XID events and feeds them to
        # on_nvml_message (agent/nvml/client.py watch_xid); the daemon closes it, not us.
        self.nvml: Any = None
        self.on_sticky: Optional[Callable[[], None]] = None  # the daemon: run the checks now
        # The daemon's event trigger (agent/daemon/triggers.py): every XID counted and every
        # failed NVML event wait (GPU lost); it must be quick (it runs on the reading thread).
        self.on_event: Optional[Callable[[], None]] = None
        self._error_event_us = -ERROR_EVENT_S * 10**6  # the last wait error that triggered one
        # One kernel-log reader at a time: the cycle's poll and the watcher's between cycles.
        self._poll_lock = threading.RLock()

    def start(self) -> Dict[str, Any]:
        """Load the state (a corrupt or foreign-boot file is replaced by a fresh one, logged)."""
        if self._source is None:
            from agent.xid.kernel_source import open_kernel_source

            self._source = open_kernel_source(run=self._run)
        try:
            self._saved = self.store.update(lambda state: None)
        except OSError as exc:
            log.error(
                "cannot write the sticky state",
                extra={"fields": {"path": self.store.path, "error": str(exc)}},
            )
            self._saved = self.store.load()  # read what we can; writes are retried per cycle
        self.state = self._saved
        return self.state

    def view(self) -> Optional[Dict[str, Any]]:
        """The sticky state as the checks must judge it (file + unsaved), or None when the
        monitor has none (the caller then reads the file)."""
        return self.state if self.state.get("version") is not None else None

    def poll(self) -> int:
        """Drain the kernel records that arrived since the last call, one at a time (memory:
        the dedupe window and one pending fault per GPU and code, whatever the burst size).
        Returns how many XIDs were counted."""
        with self._poll_lock:
            return self._poll()

    def kernel_fd(self) -> int:
        """The kernel log's descriptor to wait on with poll(2), or -1 (the journal: none)."""
        fileno = getattr(self._source, "fileno", None)
        return int(fileno()) if fileno is not None else -1

    def _poll(self) -> int:
        counted = 0
        for item in self._source.poll() if self._source is not None else ():
            line = item if isinstance(item, KernelLine) else parse_line(item)
            self.gpus.learn(line)
            ev = parse_xid(line)
            if ev is None:
                continue
            pci = recovered_pci(line, ev) if ev.code == 154 else None
            if pci:
                with self._lock:
                    self._resets.append((pci, line.mono_us))
            counted += self._accept(self.gpus.resolve(ev))
        return counted

    def _accept(self, ev: XidEvent) -> bool:
        with self._lock:
            if self._dedupe.is_duplicate(ev):
                return False
            self.counter.record(ev.label(), ev.code)
            if self.policy.is_sticky(ev.code):
                key = (ev.pci or ev.uuid or str(ev.index), ev.code)
                old = self._pending.get(key)
                self._pending[key] = (old[0] if old else ev, ev, (old[2] + 1) if old else 1)
                urgent = self.on_sticky if old is None else None
            else:
                urgent = None
        for callback in (urgent, self.on_event):
            if callback is not None:
                try:
                    callback()
                except Exception:  # the daemon's wake-up must never stop XID intake
                    log.exception("XID callback failed")
        return True

    def feed_nvml(self, event: Mapping[str, Any]) -> bool:
        """One NVML XID event ({"code", "index", "uuid", "pci_bus_id", "mono_us"}); False when
        the kernel log already reported it."""
        # The worker's line is input (a library may write on its stdout): a field of the wrong
        # type or out of range is unknown, never a label (nvml.h: index and XID code unsigned;
        # names cut to 80 characters as checks/gpu/common.py gpu_ref cuts them).
        code, mono = _uint(event.get("code"), 10**9), _uint(event.get("mono_us"), 2**64)
        if code is None:
            return False
        uuid = event.get("uuid")
        pci = pci_key(event.get("pci_bus_id"))
        ev = XidEvent(
            code=code,
            pci=pci if pci is not None and len(pci) <= 80 else None,
            source="nvml",
            mono_us=mono if mono is not None else monotonic_us(),
            message=f"NVML XID event {code}",
            index=_uint(event.get("index"), 2**32),
            uuid=uuid[:80] if isinstance(uuid, str) and uuid else None,
        )
        return self._accept(self.gpus.resolve(ev))

    def on_nvml_message(self, message: Mapping[str, Any]) -> None:
        """The callback for NvmlClient.watch_xid (agent/nvml/client.py): XIDs are fed in; a
        wait that failed with GPU-lost is logged (gpu-count and nvml-responsive own that
        condition, and the kernel log's XID 79 names the GPU)."""
        if message.get("event") == "xid":
            self.feed_nvml(message)
        elif message.get("event") == "error":
            # The worker re-arms after each clean snapshot, so a wait error that clean snapshots
            # do not cure would come back after every evaluation it triggers: it triggers one
            # at most every ERROR_EVENT_S (a GPU lost makes the snapshot unclean and stops it).
            now = monotonic_us()
            if self.on_event is not None and now - self._error_event_us >= ERROR_EVENT_S * 10**6:
                self._error_event_us = now
                with contextlib.suppress(Exception):
                    self.on_event()
            fields = {"kind": str(message.get("kind"))[:300],  # input: cut as parts.py cuts
                      "nvml_code": _uint(message.get("nvml_code"), 2**32),
                      "error": str(message.get("message"))[:300]}
            log.warning("NVML event wait failed", extra={"fields": fields})

    def observe_reset(self, pci: str, mono_us: Optional[int] = None) -> None:
        """A GPU reset happened (the NVML worker's maintenance flow around `nvidia-smi -r`)."""
        with self._lock:
            self._resets.append((pci, mono_us))

    def record(self, snapshot: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
        """Write the sticky faults and resets gathered since the last call (only when there
        are any), under the state lock, on top of what is on disk (a `clear` is never undone)."""
        self.gpus.update(snapshot)
        with self._lock:
            pending, self._pending = self._pending, {}
            resets, self._resets = self._resets, []
        faults = [
            fault_record(self.gpus.resolve(first), last, n, self.policy.klass(first.code))
            for first, last, n in pending.values()
        ]
        # ECC: compared with what this process saw last (it is the only writer of ecc_seen).
        seen_before = dict(self.state.get("ecc_seen") or {})
        seen_now: Dict[str, int] = {}
        for gpu, unc in ecc_readings(snapshot):
            # An ECC fault is a state, not an event: recorded when the count goes up, so a
            # `clear` holds until new errors arrive; a drop (reset, re-init) re-arms it.
            if unc > int(seen_before.get(gpu["pci"], 0)):
                faults.append(ecc_fault(gpu, unc))
            if seen_before.get(gpu["pci"]) != unc:
                seen_now[gpu["pci"]] = unc
        self._unsaved_faults += faults
        self._unsaved_resets += resets
        self._unsaved_seen.update(seen_now)
        if not (self._unsaved_faults or self._unsaved_resets or self._unsaved_seen):
            self._saved = self.store.load()  # nothing to write; pick up a `clear` (atomic rename)
            if self.store.corrupt:  # replace a file nobody can use by a fresh one
                with contextlib.suppress(OSError):
                    self._saved = self.store.update(lambda state: None)
            self.state = self._saved
            return self.state
        batch_faults = list(self._unsaved_faults)
        batch_resets = list(self._unsaved_resets)
        batch_seen = dict(self._unsaved_seen)

        def change(state: Dict[str, Any]) -> List[Dict[str, Any]]:
            for pci, mono in batch_resets:
                add_clear(
                    state,
                    pci,
                    "gpu-node-agent",
                    "gpu reset observed",
                    classes=["reset-gpu"],
                    mono_us=mono,
                )
            state.setdefault("ecc_seen", {}).update(batch_seen)
            return [copy.deepcopy(f) for f in batch_faults if add_fault(state, copy.deepcopy(f))]

        added: List[Dict[str, Any]] = []
        try:
            self._saved = self.store.update(lambda state: added.extend(change(state)))
        except OSError as exc:
            # The fault closes the gate now, from memory; the write is retried every cycle.
            self.write_failures += 1
            view = copy.deepcopy(self._saved or self.state or empty_state(self.store.boot_id))
            for key in ("faults", "clears"):
                view.setdefault(key, [])
            change(view)
            self.state = view
            log.error(
                "cannot write the sticky state; faults kept in memory, retrying each cycle",
                extra={"fields": {"path": self.store.path, "error": str(exc),
                                  "unsaved_faults": len(batch_faults)}},
            )
            return self.state
        self._unsaved_faults, self._unsaved_resets, self._unsaved_seen = [], [], {}
        self.state = self._saved
        for fault in added:
            log.warning(
                "sticky GPU fault recorded",
                extra={
                    "fields": {
                        "gpu": (fault.get("gpu") or {}).get("index"),
                        "pci": (fault.get("gpu") or {}).get("pci"),
                        "kind": fault.get("kind"),
                        "xid": fault.get("code"),
                        "class": fault.get("class"),
                    }
                },
            )
        return self.state

    def stop(self) -> None:
        close = getattr(self._source, "close", None)
        if close is not None:
            close()

    def cycle(self, snapshot: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
        failed: Optional[Exception] = None
        with self._poll_lock:  # GpuMap is not shared with the watcher's poll meanwhile
            self.gpus.update(snapshot)  # before polling, so new XIDs get their GPU index
            try:
                self.poll()
            except Exception as exc:  # a kernel log that fails (EINVAL, EIO) for good must not
                failed = exc  # hold back what NVML events and the snapshot found
        state = self.record(snapshot)
        if failed is not None:
            raise failed  # the daemon logs it
        return state


def start_for_daemon(config: Any, xid_policy: Any, nvml: Any = None) -> XidMonitor:
    """What `run` does at start: the state under ``config.state_dir`` for this boot, the
    kernel log (/dev/kmsg, else the journal), and NVML XID events from ``nvml``, `run`'s
    NvmlClient, whose one worker waits for them between snapshots (none in NVML maintenance
    mode). Then, each cycle: ``monitor.cycle(snapshot)``; at exit: ``monitor.stop()``."""
    from agent.xid.clear import boot_id

    monitor = XidMonitor(StateStore(config.state_dir, boot_id()), xid_policy)
    monitor.start()
    if callable(getattr(nvml, "watch_xid", None)):
        monitor.nvml = nvml
        nvml.watch_xid(monitor.on_nvml_message)
    return monitor


def _uint(value: Any, limit: int) -> Optional[int]:
    """``value`` when it is an integer in [0, limit) (a JSON true is not 1), else None."""
    ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value < limit
    return value if ok else None
