"""Sticky faults across a SIGKILL: a real recorder process (`python -m tests.xid_recorder`, the
XID part of `run`) reads a kernel-log file in /dev/kmsg record format and writes the state;
gpu-xid reads the state the way the live host does (LiveFacts' "sticky" fact).

- fatal XID recorded, process SIGKILLed, restarted with the same boot id, kernel log rotated
  away -> the check still fails;
- restarted with a new boot id -> it passes;
- a corrupt state file -> a warning and a fresh start;
- `gpu-node-agent clear` (a real subprocess) clears it while the recorder runs, and the
  recorder never writes it back; restarting the recorder or running `check` clears nothing.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.host.live import LiveFacts
from agent.host.seam import Host
from checks.policy import ResolvedPolicy, load_policy
from checks.xid.gpu_xid import GPU_XID

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
XID_79 = "NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
XID_95 = "NVRM: Xid (PCI:0000:18:00): 95, pid='<unknown>', name=<unknown>, Uncontained: FBHUB."


class Recorder:
    def __init__(self, tmp: Path, boot_file: Path, kmsg: Path):
        self.tmp, self.boot_file, self.kmsg = tmp, boot_file, kmsg
        self.state_dir = tmp / "state"
        self.proc = None
        self.err = tmp / "recorder.err"

    def start(self):
        with open(self.err, "ab") as err:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.xid_recorder", "--state-dir", str(self.state_dir),
                 "--kmsg", str(self.kmsg), "--boot-id-file", str(self.boot_file),
                 "--interval", "0.05"],
                cwd=REPO, stdout=subprocess.DEVNULL, stderr=err,
            )

    def kill(self):
        os.kill(self.proc.pid, signal.SIGKILL)
        assert self.proc.wait(timeout=10) == -signal.SIGKILL

    def state(self):
        try:
            return json.loads((self.state_dir / "sticky.json").read_text())
        except (OSError, ValueError):
            return None

    def wait_for(self, predicate, what, timeout=20.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            st = self.state()
            if st is not None and predicate(st):
                return st
            assert self.proc.poll() is None, self.err.read_text()
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}: {self.state()}\n{self.err.read_text()}")


@pytest.fixture
def rec(tmp_path):
    boot = tmp_path / "boot_id"
    boot.write_text("boot-a\n")
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("")
    r = Recorder(tmp_path, boot, kmsg)
    yield r
    if r.proc is not None and r.proc.poll() is None:
        r.kill()


def check(rec, boot, lines=()):
    root = rec.tmp / f"root-{boot}-{time.monotonic_ns()}"
    (root / "proc/sys/kernel/random").mkdir(parents=True)
    (root / "proc/sys/kernel/random/boot_id").write_text(boot + "\n")
    facts = LiveFacts(sticky_path=str(rec.state_dir / "sticky.json"))
    host = Host(root, facts=facts, kmsg=list(lines))
    return GPU_XID.run(host, ResolvedPolicy(load_policy(1), "dra"))


def append(path, seq, ts_us, message):
    with open(path, "a") as fh:
        fh.write(f"3,{seq},{ts_us},-;{message}\n")


def test_sigkill_same_boot_still_fails_new_boot_passes(rec):
    rec.start()
    rec.wait_for(lambda s: s["boot_id"] == "boot-a", "the first write")
    append(rec.kmsg, 1, 5_000_000, XID_79)
    rec.wait_for(lambda s: [f["code"] for f in s["faults"]] == [79], "XID 79 recorded")
    rec.kill()
    rec.kmsg.write_text("")  # the ring buffer rotated: only the state remembers
    assert check(rec, "boot-a").status == "fail"
    before = rec.state()["updated_at"]
    time.sleep(1.1)  # updated_at has one-second resolution
    rec.start()
    st = rec.wait_for(lambda s: s["updated_at"] != before, "the restarted recorder's write")
    assert [f["code"] for f in st["faults"]] == [79]
    out = check(rec, "boot-a")
    assert out.status == "fail" and "XID 79" in out.summary
    rec.kill()
    rec.boot_file.write_text("boot-b\n")  # a reboot
    assert check(rec, "boot-b").status == "pass"  # the check alone already ignores old boots
    rec.start()
    st = rec.wait_for(lambda s: s["boot_id"] == "boot-b", "a fresh state for the new boot")
    assert st["faults"] == [] and check(rec, "boot-b").status == "pass"


def test_corrupt_state_is_a_warning_and_a_fresh_start(rec):
    rec.state_dir.mkdir()
    (rec.state_dir / "sticky.json").write_text('{"version": 1, "faults": [')
    assert check(rec, "boot-a").status == "pass"  # an unreadable file never crashes the check
    rec.start()
    st = rec.wait_for(lambda s: s["boot_id"] == "boot-a", "a fresh state")
    assert st["faults"] == []
    err = rec.err.read_text()
    assert "level=warning" in err and "sticky state unreadable, starting fresh" in err
    append(rec.kmsg, 1, 5_000_000, XID_95)
    rec.wait_for(lambda s: [f["code"] for f in s["faults"]] == [95], "recording after the fresh start")


def test_clear_is_the_operators_way_and_sticks(rec, tmp_path):
    real_boot = Path("/proc/sys/kernel/random/boot_id")
    if not real_boot.exists():
        pytest.skip("no /proc/sys/kernel/random/boot_id on this machine (clear reads the real one)")
    rec.boot_file = real_boot
    boot = real_boot.read_text().strip()
    rec.start()
    append(rec.kmsg, 1, 1_000_000, XID_95)  # 1 s after boot: before any clear made now
    rec.wait_for(lambda s: [f["code"] for f in s["faults"]] == [95], "XID 95 recorded")
    lines = [f"3,1,1000000,-;{XID_95}"]
    assert check(rec, boot, lines).status == "fail"
    # Neither a one-shot check nor a recorder restart clears it.
    assert [f["code"] for f in rec.state()["faults"]] == [95]
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"state_dir: {rec.state_dir}\n")
    res = subprocess.run([sys.executable, "-m", "agent.cli", "clear", "00000000:18:00.0", "--config", str(cfg)],
                         cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 0, res.stderr
    assert "cleared 1 sticky fault(s)" in res.stdout
    assert "sticky GPU faults cleared by an operator" in res.stderr and "by=" in res.stderr
    assert "selector=0000:18:00" in res.stderr
    time.sleep(0.5)  # ten recorder cycles
    st = rec.state()
    assert st["faults"] == [] and st["clears"][-1]["reason"] == "operator clear"
    assert check(rec, boot, lines).status == "pass"  # the same kernel line no longer fails
    append(rec.kmsg, 2, int(time.clock_gettime(time.CLOCK_MONOTONIC) * 1e6) + 10_000_000, XID_95)
    rec.wait_for(lambda s: [f["code"] for f in s["faults"]] == [95], "a new XID after the clear")
