"""checks/xid/eval.py function by function, with exact expected values (written from the
rules in docs/xid.md: per-code thresholds over a window, inclusive at the edge; a fault the
daemon recorded counts unless a clear after it covers its GPU and class).

These were written against the mutants the mutation tier found surviving in this module.
"""
from agent.host.seam import Host
from agent.xid.events import GpuMap, XidEvent
from checks.xid.eval import (
    add_state_faults,
    fatal_summary,
    gpu_name,
    over_threshold,
    recognised,
    uptime_us,
)
from checks.xid.policy import load_xid_policy

XID = load_xid_policy()
PCI = "0000:18:00"
HOUR_US = 3600 * 1_000_000
T = 1_795_900_000.0  # a wall clock time (2026-11)


def _host(tmp_path, uptime=None):
    root = tmp_path / "root"
    (root / "proc").mkdir(parents=True)
    if uptime is not None:
        (root / "proc/uptime").write_text(uptime)
    return Host(root)


# -- uptime_us ------------------------------------------------------------------------------
def test_uptime_us_reads_proc_uptime_in_microseconds(tmp_path):
    # proc(5): /proc/uptime is "seconds since boot" then idle seconds.
    assert uptime_us(_host(tmp_path / "a", "12.5 100.25\n")) == 12_500_000
    assert uptime_us(_host(tmp_path / "b")) is None
    assert uptime_us(_host(tmp_path / "c", "garbage\n")) is None
    assert uptime_us(_host(tmp_path / "d", "\n")) is None


# -- gpu_name -------------------------------------------------------------------------------
def test_gpu_name_prefers_index_then_pci_then_uuid():
    assert gpu_name({"index": 3, "pci": PCI, "uuid": "GPU-a"}) == f"GPU 3 ({PCI})"
    assert gpu_name({"index": 0, "uuid": "GPU-a"}) == "GPU 0 (GPU-a)"
    assert gpu_name({"index": 3}) == "GPU 3 (?)"
    assert gpu_name({"pci": PCI, "uuid": "GPU-a"}) == f"GPU {PCI}"
    assert gpu_name({"uuid": "GPU-a"}) == "GPU GPU-a"
    assert gpu_name({}) == "GPU ?"


# -- over_threshold ----------------------------------------------------------------------------
def _ev(code=13, mono=None, wall=None, pci=PCI):
    return XidEvent(code=code, pci=pci, mono_us=mono, wall=wall)


def test_count_reaching_the_threshold_is_over_and_one_less_is_not():
    now = 10 * HOUR_US
    ten = [_ev(mono=now - i) for i in range(10)]
    (hit,) = over_threshold(ten, XID, now, None)
    assert hit[:3] == (f"GPU {PCI}", 13, 10)
    assert (hit[3].count, hit[3].window_s) == (10, 3600)
    assert over_threshold(ten[:9], XID, now, None) == []


def test_per_code_threshold_is_used():
    now = 10 * HOUR_US
    three = [_ev(code=94, mono=now - i) for i in range(3)]  # 94: 3 a day
    (hit,) = over_threshold(three, XID, now, None)
    assert hit[:3] == (f"GPU {PCI}", 94, 3)
    assert hit[3].window_s == 86400


def test_monotonic_window_is_inclusive_at_the_edge():
    now = 10 * HOUR_US
    edge = [_ev(mono=now - HOUR_US) for _ in range(10)]
    assert [h[2] for h in over_threshold(edge, XID, now, None)] == [10]
    past = [_ev(mono=now - HOUR_US - 1) for _ in range(10)]
    assert over_threshold(past, XID, now, None) == []


def test_wall_clock_window_when_there_is_no_monotonic_time():
    edge = [_ev(wall=T - 3600) for _ in range(10)]
    assert [h[2] for h in over_threshold(edge, XID, None, T)] == [10]
    past = [_ev(wall=T - 3600.5) for _ in range(10)]
    assert over_threshold(past, XID, None, T) == []
    # no "now" on the wall clock: a wall-dated line cannot be placed in the window
    assert over_threshold(edge, XID, None, None) == []


def test_a_monotonic_event_without_a_monotonic_now_is_not_counted_by_its_wall_time():
    both = [_ev(mono=5, wall=T) for _ in range(10)]
    assert over_threshold(both, XID, None, T) == []


def test_undated_events_always_count_and_dated_old_ones_do_not():
    now = 10 * HOUR_US
    assert [h[2] for h in over_threshold([_ev() for _ in range(10)], XID, now, T)] == [10]
    old_mono = [_ev(mono=1) for _ in range(10)]
    assert over_threshold(old_mono, XID, now, T) == []
    old_wall = [_ev(wall=T - 7200) for _ in range(10)]
    assert over_threshold(old_wall, XID, now, T) == []


def test_groups_by_gpu_and_code():
    now = 10 * HOUR_US
    evs = [_ev(mono=now) for _ in range(6)] + [_ev(mono=now, pci="0000:3a:00") for _ in range(6)]
    assert over_threshold(evs, XID, now, None) == []


# -- recognised -----------------------------------------------------------------------------
def test_recognised_kernel_log_formats():
    assert recognised(["[   12.345678] usb 1-1: new device"])  # dmesg: monotonic only
    assert recognised(["6,1,5000000,-;usb 1-1: new device"])  # /dev/kmsg record
    assert recognised(["[Sun Nov 29 10:00:00 2026] usb 1-1: new device"])  # dmesg -T: wall only
    assert recognised(["NVRM: loading NVIDIA UNIX x86_64 Kernel Module"])  # the driver's tag
    assert not recognised(["hello world", "another line"])
    assert recognised([])
    assert recognised(["", "   "])
    assert not recognised(["nvrm lowercase is not the driver's tag"])


# -- add_state_faults -------------------------------------------------------------------------
def _fault(code=48, klass="reset-gpu", gpu=None, kind="xid", **extra):
    return {"gpu": gpu if gpu is not None else {"pci": PCI}, "kind": kind, "code": code,
            "class": klass, **extra}


def _snapshot_map():
    return GpuMap({"gpus": [{"index": 2, "uuid": "GPU-two", "pci_bus_id": "00000000:18:00.0"}]})


def test_only_sticky_xid_faults_are_added_and_the_loop_goes_on_past_the_others():
    state = {"faults": [_fault(kind="ecc"), _fault(code=13, klass="restart-app"),
                        _fault(code=79, klass="reboot", message="fell off", count=2)],
             "clears": []}
    fatal = {}
    add_state_faults(fatal, state, GpuMap())
    assert fatal == {(f"GPU {PCI}", 79): {"class": "reboot", "count": 2, "message": "fell off",
                                          "sticky": True}}


def test_ecc_kind_with_a_sticky_class_is_not_an_xid_fault():
    fatal = {}
    add_state_faults(fatal, {"faults": [_fault(kind="ecc")], "clears": []}, GpuMap())
    assert fatal == {}


def test_fault_without_code_or_count():
    fault = {"gpu": {"pci": PCI}, "kind": "xid", "class": "reset-gpu"}
    fatal = {}
    add_state_faults(fatal, {"faults": [fault], "clears": []}, GpuMap())
    assert fatal == {(f"GPU {PCI}", 0): {"class": "reset-gpu", "count": 1, "message": None,
                                         "sticky": True}}


def test_fault_recorded_by_index_or_uuid_is_named_with_the_snapshot():
    for gpu in ({"index": 2}, {"uuid": "GPU-two"}):
        fatal = {}
        add_state_faults(fatal, {"faults": [_fault(gpu=gpu)], "clears": []}, _snapshot_map())
        assert list(fatal) == [("GPU 2 (0000:18:00)", 48)], gpu


def test_a_kernel_log_entry_for_the_same_fault_keeps_the_larger_count():
    fatal = {(f"GPU {PCI}", 48): {"class": "reset-gpu", "count": 5, "message": "kmsg"}}
    add_state_faults(fatal, {"faults": [_fault(count=2, message="state")], "clears": []},
                     GpuMap())
    assert fatal == {(f"GPU {PCI}", 48): {"class": "reset-gpu", "count": 5, "message": "kmsg",
                                          "sticky": True}}


def _clear(mono=None, at=None, selector=PCI, classes=("reset-gpu",)):
    return {"selector": selector, "pci": [selector], "classes": list(classes), "mono_us": mono,
            "at": at}


def test_a_clear_after_the_fault_covers_it_and_the_loop_goes_on():
    state = {"faults": [_fault(last_mono_us=100), _fault(code=95, last_mono_us=300)],
             "clears": [_clear(mono=200)]}
    fatal = {}
    add_state_faults(fatal, state, GpuMap())
    assert list(fatal) == [(f"GPU {PCI}", 95)]


def test_a_clear_is_judged_by_the_faults_own_times():
    # monotonic: the fault is newer than the clear -> still failing
    fatal = {}
    add_state_faults(fatal, {"faults": [_fault(last_mono_us=300)], "clears": [_clear(mono=200)]},
                     GpuMap())
    assert list(fatal) == [(f"GPU {PCI}", 48)]
    # wall clock only: newer than the clear -> failing; older -> cleared
    fatal = {}
    add_state_faults(fatal, {"faults": [_fault(last_at=T + 10)], "clears": [_clear(at=T)]},
                     GpuMap())
    assert list(fatal) == [(f"GPU {PCI}", 48)]
    fatal = {}
    add_state_faults(fatal, {"faults": [_fault(last_at=T - 10)], "clears": [_clear(at=T)]},
                     GpuMap())
    assert fatal == {}


def test_a_clear_covers_only_its_gpu_and_its_classes():
    fatal = {}
    other = _clear(mono=10**9, selector="0000:3a:00")
    add_state_faults(fatal, {"faults": [_fault(last_mono_us=1)], "clears": [other]}, GpuMap())
    assert list(fatal) == [(f"GPU {PCI}", 48)]
    fatal = {}
    reset_only = _clear(mono=10**9)
    add_state_faults(fatal, {"faults": [_fault(code=79, klass="reboot", last_mono_us=1)],
                             "clears": [reset_only]}, GpuMap())
    assert list(fatal) == [(f"GPU {PCI}", 79)]
    fatal = {}
    add_state_faults(fatal, {"faults": [_fault(last_mono_us=1)], "clears": [reset_only]},
                     GpuMap())
    assert fatal == {}


# -- fatal_summary ----------------------------------------------------------------------------
def test_fatal_summary_is_cut_at_300_characters():
    fatal = {(f"GPU {i} ({PCI})", 48): {"class": "reset-gpu", "count": 1} for i in range(20)}
    text = fatal_summary(fatal)
    assert len(text) == 300
    assert text.startswith(f"GPU 0 ({PCI}): XID 48 (needs a GPU reset); GPU 1 ({PCI}): XID 48")


def test_state_for_boot_keeps_this_boots_state_and_drops_another_boots():
    from checks.xid.eval import state_for_boot

    sticky = {"boot_id": "b1", "faults": [{"code": 79}], "clears": [{"selector": "all"}]}
    assert state_for_boot(sticky, "b1") == {"faults": [{"code": 79}],
                                            "clears": [{"selector": "all"}]}
    assert state_for_boot(sticky, "b2") == {"faults": [], "clears": []}
    assert state_for_boot(None, "b1") == {"faults": [], "clears": []}
    assert state_for_boot("garbage", "b1") == {"faults": [], "clears": []}
