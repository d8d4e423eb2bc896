"""gpu-xid's verdict run in-process on hand-written kernel logs, sticky state and snapshots: the
status, failure code, summary and details for each way the check ends.

Line format from NVIDIA's XID docs ("Viewing Xid Error Messages": `NVRM: Xid (PCI:0000:1a:00):
48, pid=..., name=..., <text>`) behind dmesg's "[ seconds.micro]" prefix or journalctl's ISO
time; XID 154 "recovery action changed from ... to 0x0 (None)" is an observed reset. Classes
and the default threshold (10 in 3600 s, warn) are checks/xid_policy_v1.yaml's: 13 and 31
restart-app, 43 ignore, 48 and 119 reset-gpu, 79 reboot, 154 ignore.
"""
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

from agent.host.seam import Host, StaticFacts, StaticGpus
from agent.model import Outcome, Status
from checks.policy import ResolvedPolicy, load_policy
from checks.xid.gpu_xid import GPU_XID

U0 = "GPU-00000000-0000-0000-0000-000000000000"
U1 = "GPU-11111111-1111-1111-1111-111111111111"
SNAP = {"gpus": [{"index": 0, "uuid": U0, "pci_bus_id": "00000000:1A:00.0"},
                 {"index": 1, "uuid": U1, "pci_bus_id": "00000000:2A:00.0"}]}
G0, G1 = "GPU 0 (0000:1a:00)", "GPU 1 (0000:2a:00)"
REF0 = {"index": 0, "uuid": U0, "pci_bus_id": "0000:1a:00"}
REF1 = {"index": 1, "uuid": U1, "pci_bus_id": "0000:2a:00"}
BOOT = "6f1c1a54-0d1e-4b0e-9c39-5e5c5a7a1111"


def xid(t: float, code: int, bus: str = "1a", text: str = "pid=1234, name=python, x") -> str:
    return f"[{t:12.6f}] NVRM: Xid (PCI:0000:{bus}:00): {code}, {text}"


def msg(code: int, bus: str = "1a", text: str = "pid=1234, name=python, x") -> str:
    return f"NVRM: Xid (PCI:0000:{bus}:00): {code}, {text}"


def run(tmp_path: Path, lines: Optional[List[str]], sticky: Any = None, snap: Any = SNAP,
        uptime: Optional[str] = None, xid_policy: Optional[Dict[str, Any]] = None) -> Outcome:
    proc = tmp_path / "proc/sys/kernel/random"
    proc.mkdir(parents=True, exist_ok=True)
    (proc / "boot_id").write_text(BOOT + "\n")
    if uptime is not None:
        (tmp_path / "proc/uptime").write_text(uptime)
    facts = {"sticky": sticky} if sticky is not None else {}
    host = Host(tmp_path, facts=StaticFacts(facts), gpus=StaticGpus(snap), kmsg=lines)
    pol = load_policy(2, {"xid": xid_policy} if xid_policy else None)
    return GPU_XID.run(host, ResolvedPolicy(pol, "dra", settings={}))


def base(**over: Any) -> Dict[str, Any]:
    d = {"kernel_log": True, "sticky_state": False, "xid_counts": {}, "cleared": 0, "fatal": []}
    d.update(over)
    return d


# -- nothing to fail --------------------------------------------------------------------------
def test_no_xid_since_boot(tmp_path):
    lines = ["[    0.000000] Linux version 6.8.0", "[    5.100000] nvidia: loading out-of-tree"]
    assert run(tmp_path, lines) == Outcome(Status.PASS, "no XID since boot", base())
    assert run(tmp_path, []) == Outcome(Status.PASS, "no XID since boot", base())


def test_xids_that_need_nothing_are_counted_and_pass(tmp_path):
    lines = [xid(10, 13), xid(11, 43), xid(12, 31, "2a")]
    assert run(tmp_path, lines) == Outcome(
        Status.PASS, "3 XID(s) since boot, none needs a GPU reset or reboot",
        base(xid_counts={"0:13": 1, "0:43": 1, "1:31": 1}))


def test_unreadable_kernel_log(tmp_path):
    assert run(tmp_path, None) == Outcome(
        Status.UNKNOWN, "kernel log not readable (no /dev/kmsg access and no journal); sticky "
        "state unknown", base(kernel_log=False), code="kernel-log-unreadable")
    sticky = {"boot_id": BOOT, "faults": [], "clears": []}
    assert run(tmp_path, None, sticky) == Outcome(
        Status.UNKNOWN, "kernel log not readable (no /dev/kmsg access and no journal); sticky "
        "state has no faults", base(kernel_log=False, sticky_state=True),
        code="kernel-log-unreadable")


def test_kernel_log_of_garbage_is_unknown(tmp_path):
    lines = ["<html>", "<body>502 Bad Gateway</body>", "</html>"]
    assert run(tmp_path, lines) == Outcome(
        Status.UNKNOWN, "kernel log has 3 line(s), none in a kernel log format", base(),
        code="kernel-log-unrecognised")


# -- sticky classes ---------------------------------------------------------------------------
def test_reset_class_xid_fails_naming_the_gpu(tmp_path):
    lines = [xid(100, 48), xid(101, 48)]
    out = run(tmp_path, lines)
    assert out == Outcome(
        Status.FAIL, f"{G0}: XID 48 x2 (needs a GPU reset)",
        base(xid_counts={"0:48": 2},
             fatal=[{"gpu": G0, "xid": 48, "class": "reset-gpu", "count": 2, "message": msg(48)}],
             gpus_at_fault=[REF0]),
        code="xid-needs-reset")


def test_a_reboot_class_xid_makes_the_verdict_need_a_reboot(tmp_path):
    lines = [xid(100, 48), xid(101, 79, "2a", "pid=', name=, GPU has fallen off the bus.")]
    out = run(tmp_path, lines)
    assert out.status == Status.FAIL and out.code == "xid-needs-reboot"
    assert out.summary == f"{G0}: XID 48 (needs a GPU reset); {G1}: XID 79 (needs a reboot)"
    assert out.details["fatal"] == [
        {"gpu": G0, "xid": 48, "class": "reset-gpu", "count": 1, "message": msg(48)},
        {"gpu": G1, "xid": 79, "class": "reboot", "count": 1,
         "message": msg(79, "2a", "pid=', name=, GPU has fallen off the bus.")}]
    assert out.details["gpus_at_fault"] == [REF0, REF1]


def fault(code: int = 48, klass: str = "reset-gpu", gpu: Any = None, **over: Any) -> Dict:
    f = {"kind": "xid", "class": klass, "code": code, "count": 3, "message": "kept",
         "gpu": {"pci": "0000:2a:00", "index": 1, "uuid": U1} if gpu is None else gpu,
         "last_mono_us": 50_000_000, "last_at": None}
    f.update(over)
    return f


def test_sticky_fault_fails_after_the_log_rotated(tmp_path):
    sticky = {"boot_id": BOOT, "faults": [fault()], "clears": []}
    out = run(tmp_path, ["[  900.000000] nothing"], sticky)
    assert out == Outcome(
        Status.FAIL, f"{G1}: XID 48 x3 (needs a GPU reset)",
        base(sticky_state=True,
             fatal=[{"gpu": G1, "xid": 48, "class": "reset-gpu", "count": 3, "message": "kept",
                     "sticky": True}],
             gpus_at_fault=[REF1]),
        code="xid-needs-reset")


def test_sticky_fault_wins_over_an_unreadable_log(tmp_path):
    sticky = {"boot_id": BOOT, "faults": [fault(79, "reboot")], "clears": []}
    out = run(tmp_path, None, sticky)
    assert (out.status, out.code) == (Status.FAIL, "xid-needs-reboot")
    assert out.summary == f"{G1}: XID 79 x3 (needs a reboot)"
    assert out.details["kernel_log"] is False and out.details["sticky_state"] is True


def test_sticky_fault_naming_no_gpu_has_no_gpus_at_fault(tmp_path):
    sticky = {"boot_id": BOOT, "faults": [fault(gpu={})], "clears": []}
    out = run(tmp_path, [], sticky)
    assert out.summary == "GPU ?: XID 48 x3 (needs a GPU reset)"
    assert "gpus_at_fault" not in out.details


def test_sticky_state_of_another_boot_is_dropped(tmp_path):
    sticky = {"boot_id": "another-boot", "faults": [fault()], "clears": []}
    assert run(tmp_path, [], sticky) == Outcome(Status.PASS, "no XID since boot",
                                                base(sticky_state=True))


# -- clears and observed resets ---------------------------------------------------------------
RESET = ("pid=', name=, GPU recovery action changed from 0x1 (GPU Reset Required) to "
         "0x0 (None)")


def test_an_observed_reset_clears_the_reset_class_xids_before_it(tmp_path):
    lines = [xid(100, 48), xid(200, 154, text=RESET)]
    assert run(tmp_path, lines) == Outcome(
        Status.PASS, "2 XID(s) since boot, none needs a GPU reset or reboot (1 cleared)",
        base(xid_counts={"0:48": 1, "0:154": 1}, cleared=1))


def test_an_xid_after_the_reset_still_fails(tmp_path):
    lines = [xid(100, 48), xid(200, 154, text=RESET), xid(300, 48)]
    out = run(tmp_path, lines)
    assert (out.status, out.summary) == (Status.FAIL, f"{G0}: XID 48 (needs a GPU reset)")
    assert out.details["cleared"] == 1 and out.details["xid_counts"] == {"0:48": 2, "0:154": 1}


def test_an_operator_clear_covers_earlier_xids_of_its_gpu(tmp_path):
    clear = {"selector": "0", "pci": ["0000:1a:00"], "classes": None, "mono_us": 150_000_000,
             "at": None}
    sticky = {"boot_id": BOOT, "faults": [], "clears": [clear]}
    out = run(tmp_path, [xid(100, 48), xid(120, 79)], sticky)
    assert out == Outcome(
        Status.PASS, "2 XID(s) since boot, none needs a GPU reset or reboot (2 cleared)",
        base(sticky_state=True, xid_counts={"0:48": 1, "0:79": 1}, cleared=2))


# -- repeating application XIDs ---------------------------------------------------------------
def over_outcome(n: int, status: Status = Status.WARN, code: str = "xid-repeating",
                 **more: Any) -> Outcome:
    return Outcome(status, f"{G0}: XID 13 x{n} in 3600s (threshold 10)",
                   base(xid_counts={"0:13": n},
                        over_threshold=[{"gpu": G0, "xid": 13, "count": n}], **more), code=code)


def test_ten_in_the_window_warn_and_nine_pass(tmp_path):
    lines = [xid(1000 + i, 13) for i in range(10)]
    assert run(tmp_path, lines) == over_outcome(10)
    assert run(tmp_path, lines[:9]) == Outcome(
        Status.PASS, "9 XID(s) since boot, none needs a GPU reset or reboot",
        base(xid_counts={"0:13": 9}))


def test_the_window_ends_at_the_uptime(tmp_path):
    lines = [xid(1000 + i, 13) for i in range(10)]
    # Uptime 1009 + 3600 s: the first XID (at 1000 s) is 3609 s old, out of the window.
    out = run(tmp_path, lines, uptime="4609.00 8000.00\n")
    assert out.status == Status.PASS and out.summary.startswith("10 XID(s) since boot")
    # At 1000 + 3600 s every one is inside it (the edge counts).
    assert run(tmp_path, lines, uptime="4600.00 8000.00\n") == over_outcome(10)


@pytest.mark.parametrize("uptime", ["", "garbage\n", "\n"])
def test_an_unreadable_uptime_uses_the_newest_xid(tmp_path, uptime):
    lines = [xid(1000 + i, 13) for i in range(10)]
    assert run(tmp_path, lines, uptime=uptime) == over_outcome(10)


def iso(second: int, code: int = 13) -> str:
    return f"2026-11-30T10:{second // 60:02d}:{second % 60:02d}+00:00 host kernel: {msg(code)}"


def test_wall_clock_window_ends_at_the_newest_xid(tmp_path):
    lines = [iso(i) for i in range(10)]
    out = run(tmp_path, lines)
    assert (out.status, out.code) == (Status.WARN, "xid-repeating")
    assert out.details["over_threshold"] == [{"gpu": G0, "xid": 13, "count": 10}]
    # One of them two hours before the rest: nine in the last hour.
    early = ["2026-11-30T08:00:00+00:00 host kernel: " + msg(13)] + lines[1:]
    assert run(tmp_path, early).status == Status.PASS


def test_a_threshold_set_to_fail_fails(tmp_path):
    policy = {"codes": {13: {"threshold": {"count": 10, "window_s": 3600, "status": "fail"}}}}
    lines = [xid(1000 + i, 13) for i in range(12)]
    # The fail is GPU 0's: it is named (gpus_at_fault: index, uuid, slot as GpuMap resolved
    # the kernel's PCI:0000:1a:00).
    assert run(tmp_path, lines, xid_policy=policy) == over_outcome(
        12, Status.FAIL, "xid-repeating-fail", gpus_at_fault=[REF0])


def test_over_threshold_summary_lists_each_gpu_and_is_cut(tmp_path):
    lines = [xid(1000 + i, 13) for i in range(10)] + [xid(2000 + i, 31, "2a") for i in range(11)]
    out = run(tmp_path, lines)
    assert out.summary == (f"{G0}: XID 13 x10 in 3600s (threshold 10); "
                           f"{G1}: XID 31 x11 in 3600s (threshold 10)")
    many = [{"index": i, "uuid": f"GPU-{i:08d}", "pci_bus_id": f"00000000:{i + 16:02X}:00.0"}
            for i in range(12)]
    lines = [xid(1000 + n, 13, f"{i + 16:02x}") for i in range(12) for n in range(10)]
    out = run(tmp_path, lines, snap={"gpus": many})
    assert out.code == "xid-repeating" and len(out.summary) == 300


def test_an_observed_reset_in_a_wall_clock_log_clears_only_what_came_before(tmp_path):
    before = ["2026-11-30T10:00:00+00:00 host kernel: " + msg(48),
              "2026-11-30T10:05:00+00:00 host kernel: " + msg(154, text=RESET)]
    out = run(tmp_path, before)
    assert (out.status, out.details["cleared"]) == (Status.PASS, 1)
    after = before + ["2026-11-30T10:10:00+00:00 host kernel: " + msg(48)]
    out = run(tmp_path, after)
    assert (out.status, out.code, out.details["cleared"]) == (Status.FAIL, "xid-needs-reset", 1)


# -- which GPUs a repeating-XID fail names (details["gpus_at_fault"]) -------------------------
# Only the GPUs over a `status: fail` threshold fail the check, so only they are at fault; a
# GPU over a warning threshold is in the summary but not named (its own verdict would warn).
FAIL_13 = {"codes": {13: {"threshold": {"count": 10, "window_s": 3600, "status": "fail"}}}}


def test_a_repeating_fail_names_only_the_gpu_over_the_failing_threshold(tmp_path):
    lines = [xid(1000 + i, 13) for i in range(10)] + [xid(2000 + i, 31, "2a") for i in range(10)]
    out = run(tmp_path, lines, xid_policy=FAIL_13)
    assert (out.status, out.code) == (Status.FAIL, "xid-repeating-fail")
    assert out.summary == (f"{G0}: XID 13 x10 in 3600s (threshold 10); "
                           f"{G1}: XID 31 x10 in 3600s (threshold 10)")
    assert out.details["gpus_at_fault"] == [REF0]


def test_a_repeating_fail_on_two_gpus_names_both_in_order(tmp_path):
    lines = [xid(1000 + i, 13, "2a") for i in range(10)] + [xid(2000 + i, 13) for i in range(11)]
    out = run(tmp_path, lines, xid_policy=FAIL_13)
    assert (out.status, out.code) == (Status.FAIL, "xid-repeating-fail")
    assert out.details["gpus_at_fault"] == [REF0, REF1]


def test_a_repeating_fail_on_a_gpu_the_snapshot_lacks_names_its_slot(tmp_path):
    # PCI:0000:5d:00 is no snapshot GPU: the kernel's slot is the name agent/gpu_health.py
    # matches (or adds as a GPU NVML does not list).
    lines = [xid(1000 + i, 13, "5d") for i in range(10)]
    out = run(tmp_path, lines, xid_policy=FAIL_13)
    assert (out.status, out.code) == (Status.FAIL, "xid-repeating-fail")
    assert out.details["gpus_at_fault"] == [{"pci_bus_id": "0000:5d:00"}]


def test_a_repeating_warning_names_no_gpu(tmp_path):
    lines = [xid(1000 + i, 13) for i in range(10)]
    out = run(tmp_path, lines)
    assert (out.status, out.code) == (Status.WARN, "xid-repeating")
    assert "gpus_at_fault" not in out.details


def test_an_application_xid_below_its_threshold_leaves_a_fatal_verdict_its_own_gpus(tmp_path):
    # GPU 1's XID 13s (under the threshold) do not join GPU 0's reset-class fault.
    lines = [xid(1000, 48)] + [xid(1001 + i, 13, "2a") for i in range(3)]
    out = run(tmp_path, lines, xid_policy=FAIL_13)
    assert (out.status, out.code) == (Status.FAIL, "xid-needs-reset")
    assert out.details["gpus_at_fault"] == [REF0]
