"""The kernel-log fallback through the real journal: journal export text turned into a journal
file by systemd-journal-remote, read back by the real `journalctl -k -b -o json --directory`
(Debian's, unpacked by .ci/setup.d/55-journal-remote.sh). Entries carry this machine's boot id, so `-b`
selects them, and `_TRANSPORT=kernel`, so `-k` does."""

import subprocess
import time
from pathlib import Path

import pytest

from agent.host.seam import Host
from agent.safeio.commands import SubprocessCommands
from agent.xid.kernel_source import JournalSource, open_kernel_source, since_boot_lines
from agent.xid.monitor import XidMonitor
from agent.xid.state import StateStore
from checks.policy import ResolvedPolicy, load_policy
from checks.xid.gpu_xid import GPU_XID
from checks.xid.policy import load_xid_policy
from tests.components import component

pytestmark = pytest.mark.integration
XID_79 = "NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


@pytest.fixture
def journal(tmp_path):
    # Debian's systemd-journal-remote unpacked by .ci/setup.d/55-journal-remote.sh; the
    # machine's own journalctl reads what it wrote.
    remote = component("systemd-journal-remote")
    component("journalctl")
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip().replace("-", "")
    directory = tmp_path / "journal"
    directory.mkdir()
    counter = [0]

    def add(entries):
        counter[0] += 1
        now = int(time.time() * 1e6)
        text = b""
        for n, (message, mono_s, transport) in enumerate(entries):
            fields = {"__REALTIME_TIMESTAMP": now + n, "__MONOTONIC_TIMESTAMP": int(mono_s * 1e6) + 50,
                      "_BOOT_ID": boot, "_MACHINE_ID": "0123456789abcdef0123456789abcdef",
                      "_HOSTNAME": "gpu-host", "_TRANSPORT": transport, "PRIORITY": 3,
                      "SYSLOG_IDENTIFIER": "kernel" if transport == "kernel" else "app",
                      "_SOURCE_MONOTONIC_TIMESTAMP": int(mono_s * 1e6), "MESSAGE": message}
            text += b"".join(f"{k}={v}\n".encode() for k, v in fields.items()) + b"\n"
        subprocess.run([remote, "-o", str(directory / f"part{counter[0]}.journal"), "-"],
                       input=text, check=True, timeout=60, capture_output=True)

    return directory, add


def test_since_boot_from_the_journal_when_kmsg_cannot_be_read(journal, tmp_path):
    directory, add = journal
    add([(XID_79, 5.0, "kernel"), ("e1000e: eth0 NIC Link is Up", 6.0, "kernel"),
         ("NVRM: Xid (PCI:0000:18:00): 79, from a user process, not the kernel", 6.5, "syslog")])
    run = SubprocessCommands().run
    lines = since_boot_lines(str(tmp_path / "no-kmsg"), run=run, journal_dir=str(directory))
    assert lines == [f"[    5.000000] {XID_79}"]  # kernel transport only, NVRM only
    root = tmp_path / "root"
    (root / "proc/sys/kernel/random").mkdir(parents=True)
    (root / "proc/sys/kernel/random/boot_id").write_text("b\n")
    out = GPU_XID.run(Host(root, kmsg=lines), ResolvedPolicy(load_policy(1), "dra"))
    assert out.status == "fail" and "XID 79 (needs a reboot)" in out.summary


def test_the_daemon_continues_after_the_cursor(journal, tmp_path):
    directory, add = journal
    add([(XID_79, 5.0, "kernel")])
    source = open_kernel_source(str(tmp_path / "no-kmsg"), run=SubprocessCommands().run,
                                journal_dir=str(directory))
    assert isinstance(source, JournalSource)
    mon = XidMonitor(StateStore(str(tmp_path / "state"), "b"), load_xid_policy(), source=source)
    mon.start()
    assert [f["code"] for f in mon.cycle(None)["faults"]] == [79]
    add([("NVRM: Xid (PCI:0000:18:00): 13, pid=1, name=x, Graphics Exception", 9.0, "kernel")])
    mon.cycle(None)
    mon.cycle(None)  # nothing new: the cursor holds
    assert mon.counter.counts() == {("0000:18:00", 79): 1, ("0000:18:00", 13): 1}
