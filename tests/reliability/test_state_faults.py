"""Fault matrix, sticky-state rows: corrupt and wrong-typed state files, a read-only and a
full state directory (a real tmpfs, mounted for the test), an unreadable boot id, and an XID
storm. The gate verdicts come from the real gpu-xid check run by the real scheduler."""
import contextlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from agent.cli import resolve_policy
from agent.config import Config
from agent.daemon.sdnotify import Notifier
from agent.daemon.service import Daemon, Generation
from agent.logs import setup
from agent.model import Interval
from agent.xid import clear as clear_mod
from agent.xid.monitor import XidMonitor
from agent.xid.state import StateStore, add_fault, read_state_file
from checks.xid.gpu_xid import GPU_XID
from tests.conftest import run_cli
from tests.integration.agentproc import wait_for
from tests.reliability.helpers import HEALTHY_ROOT, Running, tree_source

# the fixture tree's /proc/sys/kernel/random/boot_id: the monitor runs "in that boot"
TREE_BOOT = (Path(HEALTHY_ROOT) / "proc/sys/kernel/random/boot_id").read_text().strip()
PCI_BUS_ID = "00000000:9B:00.0"  # NVML's form; the kernel log's key is 0000:9b:00
FAULT = {"gpu": {"pci": "0000:9b:00", "index": 0}, "kind": "xid", "code": 79, "class": "reboot",
         "source": "kmsg", "first_mono_us": 1, "last_mono_us": 2, "count": 1,
         "message": "NVRM: Xid (PCI:0000:9b:00): 79, GPU has fallen off the bus."}


class _Quiet:
    """A kernel log with nothing in it (the NVML event stream is the only source)."""

    def poll(self):
        return []


class _Lines:
    def __init__(self, lines):
        self.lines = list(lines)

    def poll(self):
        out, self.lines = self.lines, []
        return out


def _generation(state_dir):
    config = Config.model_validate({"state_dir": str(state_dir), "run": {
        "fast_interval": 600, "slow_interval": 600, "listen_address": "127.0.0.1:0"}})
    return Generation(config, None, resolve_policy(config, None, "dra"), "dra", [])


def _daemon(state_dir, boot=TREE_BOOT, source=None, root=HEALTHY_ROOT):
    gen = _generation(state_dir)
    monitor = XidMonitor(StateStore(str(state_dir), boot), gen.policy.policy.xid,
                         source=source or _Quiet())
    monitor.start()
    d = Daemon([GPU_XID], lambda: gen, tree_source(root), "test", setup(),
               notifier=Notifier({}), xid_monitor=monitor)
    return d, monitor


def _status(d):
    return d.report.result("gpu-xid").status.value


def _nvml_xid79(monitor):
    monitor.on_nvml_message({"event": "xid", "code": 79, "index": 0, "uuid": "GPU-0",
                             "pci_bus_id": PCI_BUS_ID, "mono_us": 10_000_000})


@contextlib.contextmanager
def _tmpfs(path: Path, size: str = "64k", read_only: bool = False):
    """A real small filesystem for the state directory (mount(8) tmpfs, as root)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (the CI runs the suite as root)")
    path.mkdir(parents=True, exist_ok=True)
    opts = f"size={size},mode=0755" + (",ro" if read_only else "")
    subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "gna-state", str(path)], check=True,
                   capture_output=True, timeout=30)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True, timeout=30)


def _fill(directory: Path) -> None:
    """Fill the filesystem until ENOSPC (bounded: the tmpfs is 64 KiB). Unbuffered writes, so
    no flush at close can raise afterwards."""
    fd = os.open(directory / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with contextlib.suppress(OSError):
            for _ in range(1024):
                os.write(fd, b"\0" * 4096)
    finally:
        os.close(fd)


def test_corrupt_state_is_a_warning_a_fresh_start_and_clear_works(tmp_path, caplog):
    """Row "corrupt state": not JSON -> a warning, a fresh state, `clear all` exits 0."""
    (tmp_path / "sticky.json").write_bytes(b"{\"version\": 1, \"faults\": [\xff")
    assert StateStore(str(tmp_path), "b").load()["faults"] == []
    assert "starting fresh" in caplog.text
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(f"state_dir: {tmp_path}\n")
    result = run_cli(["clear", "all", "--config", str(cfg)])
    assert result.rc == 0, result.err
    assert read_state_file(str(tmp_path / "sticky.json"))["clears"][0]["selector"] == "all"


@pytest.mark.parametrize("bad", [
    {"faults": [{**FAULT, "count": "many"}]},
    {"faults": [{**FAULT, "gpu": "0000:9b:00"}]},
    {"faults": [{**FAULT, "last_mono_us": "2"}]},
    {"clears": [{"selector": 0, "mono_us": 1}]},
    {"clears": [{"selector": "all", "classes": "reset-gpu"}]},
    {"ecc_seen": {"0000:9b:00": "3"}},
    {"boot_id": 7},
])
def test_wrong_typed_state_is_corrupt_and_clear_all_exits_0(tmp_path, caplog, bad):
    """Row "wrong-typed state": the right shape with a wrong field type is corrupt (a warning
    and a fresh start), `clear all` exits 0 (it used to exit 3), and the daemon replaces the
    file, keeping the bad one aside, so gpu-xid is not wedged at unknown."""
    doc = {"version": 1, "boot_id": "boot-1", "faults": [], "clears": [], **bad}
    path = tmp_path / "sticky.json"
    path.write_text(json.dumps(doc))
    assert read_state_file(str(path)) is None  # the check's fact: unknown, never a guess
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(f"state_dir: {tmp_path}\n")
    result = run_cli(["clear", "all", "--config", str(cfg)])
    assert result.rc == 0, result.err
    assert "corrupt" in caplog.text
    path.write_text(json.dumps(doc))
    d, monitor = _daemon(tmp_path)
    monitor.cycle(None)
    assert read_state_file(str(path)) is not None  # replaced by a fresh, valid file
    assert json.loads((tmp_path / "sticky.json.corrupt").read_text()) == doc


def test_read_only_state_dir_still_closes_the_gate_from_memory(tmp_path):
    """Row "read-only state directory": an NVML-only fatal XID (79) closes the gate at once
    (an urgent cycle, not the next 600 s interval) although nothing can be written."""
    with _tmpfs(tmp_path / "state", read_only=True) as state:
        d, monitor = _daemon(state)
        with Running(d):
            wait_for(lambda: d.report is not None, 20, "first report")
            # the fixture tree has no kernel log: unknown, with no fatal fault, before
            assert d.report.result("gpu-xid").status.value == "unknown"
            assert d.report.result("gpu-xid").details["fatal"] == []
            _nvml_xid79(monitor)
            wait_for(lambda: _status(d) == "fail", 20, "gpu-xid failing on the fault")
            assert not d.report.gate.open and d.report.gate.blocking == ("gpu-xid",)
            assert "XID 79" in d.report.result("gpu-xid").summary
            assert monitor.write_failures >= 1
            assert not (state / "sticky.json").exists()


def test_full_state_dir_closes_the_gate_and_the_write_is_retried(tmp_path):
    """Row "full state directory": ENOSPC on the state write; the gate closes from memory;
    once space is freed the next cycle writes the fault."""
    with _tmpfs(tmp_path / "state", size="64k") as state:
        d, monitor = _daemon(state)
        _fill(state)
        with Running(d):
            wait_for(lambda: d.report is not None, 20, "first report")
            assert _status(d) == "unknown"
            _nvml_xid79(monitor)
            wait_for(lambda: _status(d) == "fail", 20, "gpu-xid failing on the fault")
            assert monitor.write_failures >= 1
            on_disk = read_state_file(str(state / "sticky.json"))
            assert on_disk is not None and on_disk["faults"] == []
            (state / "filler").unlink()
            d.urgent_cycle()  # the next cycle, without waiting 600 s for it
            wait_for(lambda: (read_state_file(str(state / "sticky.json")) or {}).get("faults"),
                     20, "the retried write")
            written = read_state_file(str(state / "sticky.json"))["faults"]
            assert [(f["code"], f["gpu"]["pci"]) for f in written] == [(79, "0000:9b:00")]
            assert _status(d) == "fail" and not d.report.gate.open


def test_sticky_faults_kept_when_the_boot_id_is_unreadable(tmp_path):
    """Safety branch: without a boot id nobody can tell whether the host rebooted, so the
    faults are kept (never cleared) and the file keeps the boot id it was written under."""
    store = StateStore(str(tmp_path), "boot-A")
    store.update(lambda s: add_fault(s, dict(FAULT)))
    assert clear_mod.boot_id(str(tmp_path / "no-such-boot-id")) is None
    blind = StateStore(str(tmp_path), None)
    assert [f["code"] for f in blind.load()["faults"]] == [79]
    blind.update(lambda s: None)  # what the daemon does at start
    on_disk = read_state_file(str(tmp_path / "sticky.json"))
    assert [f["code"] for f in on_disk["faults"]] == [79] and on_disk["boot_id"] == "boot-A"
    # and the gate: on a host whose boot id cannot be read, gpu-xid still fails on the fault
    root = tmp_path / "root"
    shutil.copytree(HEALTHY_ROOT, root, symlinks=True)
    (root / "proc/sys/kernel/random/boot_id").unlink()
    d, monitor = _daemon(tmp_path, boot=None, root=str(root))
    monitor.cycle(None)
    report = d.run_cycle(list(Interval))
    assert report.result("gpu-xid").status.value == "fail" and not report.gate.open
    # a readable, different boot id is a reboot: cleared (the guard is for None only)
    assert StateStore(str(tmp_path), "boot-B").load()["faults"] == []


def test_xid_storm_is_counted_in_full_and_recorded_once(tmp_path):
    """Row "XID storm": 20,000 kernel-log XID 79 lines and 5,000 XID 13 lines for one GPU in
    one poll: every line counted, one sticky record for (GPU, 79) carrying the count, none for
    the restart-app XID 13, and the state file stays small."""
    lines = [f"3,{i},{5_000_000 + i},-;NVRM: Xid (PCI:0000:9b:00): 79, pid='<unknown>', "
             "name=<unknown>, GPU has fallen off the bus." for i in range(20_000)]
    lines += [f"3,{30_000 + i},{9_000_000 + i},-;NVRM: Xid (PCI:0000:9b:00): 13, pid=1, "
              "name=x, Graphics Exception" for i in range(5_000)]
    gen = _generation(tmp_path)
    monitor = XidMonitor(StateStore(str(tmp_path), "boot-1"), gen.policy.policy.xid,
                         source=_Lines(lines))
    monitor.start()
    state = monitor.cycle(None)
    counts = monitor.counter.counts()
    assert sum(n for (g, c), n in counts.items() if c == 79) == 20_000
    assert sum(n for (g, c), n in counts.items() if c == 13) == 5_000
    assert [(f["code"], f["count"]) for f in state["faults"]] == [(79, 20_000)]
    assert (tmp_path / "sticky.json").stat().st_size < 4096
