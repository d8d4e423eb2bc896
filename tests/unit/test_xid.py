"""XID parsing, de-duplication, counters, the policy data, and the monitor's state writes."""

import pytest

from agent.snapshot import pci_key
from agent.xid.events import (
    Deduper,
    GpuMap,
    XidCounter,
    XidEvent,
    events_from_lines,
    parse_xid,
)
from agent.xid.kmsg import KernelLine, parse_line
from agent.xid.monitor import XidMonitor
from agent.xid.state import StateStore, add_clear
from checks.policy import load_policy
from checks.xid.policy import load_xid_policy


class Lines:
    """A kernel source double: what each poll returns."""

    def __init__(self):
        self.batches = []

    def poll(self):
        return self.batches.pop(0) if self.batches else []


@pytest.mark.parametrize(
    "message, pci, code, pid, name",
    [
        ("NVRM: Xid (PCI:0000:9b:00): 119, pid=2024380, name=nvidia-smi, Timeout after 6s",
         "0000:9b:00", 119, "2024380", "nvidia-smi"),
        ("NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp",
         "0000:cb:00", 13, "<unknown>", "<unknown>"),
        ("NVRM: Xid (PCI:0000:65:00): 79, GPU has fallen off the bus.", "0000:65:00", 79, None, None),
        ("NVRM: Xid (0000:03:00): 14, Channel 00000001", "0000:03:00", 14, None, None),  # old drivers
        ("NVRM: Xid (PCI:0001:C1:00.0): 48, pid=1, name=x, DBE", "0001:c1:00", 48, "1", "x"),
    ],
)
def test_parse_xid(message, pci, code, pid, name):
    ev = parse_xid(KernelLine(message, 5))
    assert (ev.pci, ev.code, ev.pid, ev.name, ev.mono_us) == (pci, code, pid, name, 5)


@pytest.mark.parametrize("message", ["NVRM: GPU at PCI:0000:9b:00: GPU-5096", "nvidia-modeset: Xid-like",
                                     "NVRM: Xid (PCI:0000:9b:00): , pid=1"])
def test_not_an_xid(message):
    assert parse_xid(KernelLine(message)) is None


def test_pci_keys_from_nvml_and_kernel_agree():
    assert pci_key("00000000:9B:00.0") == pci_key("PCI:0000:9b:00") == "0000:9b:00"
    assert pci_key("garbage") is None and pci_key(None) is None
    # udev's form is the same key; an address with an empty part names no GPU
    assert pci_key("0000:9b:00.0") == "0000:9b:00"
    assert pci_key("0000::00") is None and pci_key("PCI:0000:9b:") is None


def test_events_resolve_gpus_and_drop_replayed_records():
    snap = {"gpus": [{"index": 4, "uuid": "GPU-4", "pci_bus_id": "00000000:9B:00.0"}]}
    line = "3,10,5000000,-;NVRM: Xid (PCI:0000:9b:00): 119, pid=1, name=x, t"
    events, resets = events_from_lines([line, line], GpuMap(snap))
    assert [(e.index, e.uuid, e.code) for e in events] == [(4, "GPU-4", 119)] and resets == []


def test_gpu_at_lines_give_the_uuid_without_a_snapshot():
    events, _ = events_from_lines([
        "[ 5.0] NVRM: GPU at PCI:0000:65:00: GPU-cd57429b-a4d9-917d-72d6-1d9b6c4f6a3a",
        "[ 5.1] NVRM: Xid (PCI:0000:65:00): 79, GPU has fallen off the bus.",
    ])
    assert events[0].uuid == "GPU-cd57429b-a4d9-917d-72d6-1d9b6c4f6a3a" and events[0].index is None
    assert events[0].label() == "0000:65:00"


def test_xid_154_to_none_is_a_reset():
    _, resets = events_from_lines([
        "[ 9.0] NVRM: Xid (PCI:0000:9b:00): 154, GPU recovery action changed from 0x0 (None) "
        "to 0x1 (GPU Reset Required)",
        "[ 9.9] NVRM: Xid (PCI:0000:9b:00): 154, GPU recovery action changed from 0x1 (GPU Reset "
        "Required) to 0x0 (None)",
    ])
    assert [(pci, line.mono_us) for pci, line in resets] == [("0000:9b:00", 9_900_000)]


def ev(source, mono, code=48, pci="0000:18:00"):
    return XidEvent(code=code, pci=pci, source=source, mono_us=mono)


def test_dedupe_matches_across_sources_one_to_one():
    d = Deduper(5.0)
    assert not d.is_duplicate(ev("kmsg", 1_000_000))
    assert not d.is_duplicate(ev("kmsg", 1_100_000))  # same source: two XIDs
    assert d.is_duplicate(ev("nvml", 2_000_000))
    assert d.is_duplicate(ev("nvml", 2_100_000))
    assert not d.is_duplicate(ev("nvml", 2_200_000))  # nothing left to match
    assert not d.is_duplicate(ev("kmsg", 9_000_000, code=94))  # other code
    assert not d.is_duplicate(ev("nvml", 20_000_000, code=94))  # outside the window


def test_counter_counts_per_gpu_and_code():
    c = XidCounter()
    for gpu, code in [("0", 13), ("0", 13), ("1", 13), ("0", 79)]:
        c.record(gpu, code)
    assert c.counts() == {("0", 13): 2, ("1", 13): 1, ("0", 79): 1}


# Classes per NVIDIA's XID catalog, "Resolution Bucket (Immediate Action)": RESET_GPU,
# RESTART_BM, RESTART_APP, IGNORE (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html).
CATALOG = {48: "reset-gpu", 62: "reset-gpu", 63: "ignore", 64: "reset-gpu", 74: "reset-gpu",
           79: "reboot", 92: "ignore", 94: "restart-app", 95: "reset-gpu", 109: "reset-gpu",
           119: "reset-gpu", 120: "reset-gpu", 140: "reset-gpu", 13: "restart-app", 31: "restart-app"}


def test_policy_covers_the_issue_codes_with_a_reason_each():
    xid = load_xid_policy()
    assert {c: xid.klass(c) for c in CATALOG} == CATALOG
    assert all(xid.codes[c].why and xid.codes[c].catalog for c in CATALOG)
    assert xid.klass(999) == "restart-app" and not xid.is_sticky(999)


def test_policy_overrides_from_the_config():
    pol = load_policy(1, {"xid": {"codes": {13: {"class": "ignore"}, "79": {"class": "reset-gpu"}},
                                  "default_threshold": {"count": 50}}}).xid
    assert pol.klass(13) == "ignore" and pol.klass(79) == "reset-gpu"
    assert pol.codes[79].catalog == "RESTART_BM"  # other fields of the code kept
    assert pol.default_threshold.count == 50 and pol.default_threshold.window_s == 3600


def test_a_bad_policy_override_is_an_error():
    with pytest.raises(Exception, match="class"):
        load_policy(1, {"xid": {"codes": {13: {"class": "panic"}}}})


def snapshot(unc=0):
    return {"gpus": [{"index": 2, "uuid": "GPU-2", "pci_bus_id": "00000000:3A:00.0",
                      "ecc": {"volatile": {"uncorrected": unc, "corrected": 0}}}]}


def make(tmp_path):
    src = Lines()
    mon = XidMonitor(StateStore(str(tmp_path), "boot-1"), load_xid_policy(), source=src)
    mon.start()
    return mon, src


def test_monitor_records_only_sticky_classes_and_counts_all(tmp_path):
    mon, src = make(tmp_path)
    src.batches.append([parse_line("3,1,1000000,-;NVRM: Xid (PCI:0000:3a:00): 13, pid=1, name=a, x"),
                        parse_line("3,2,2000000,-;NVRM: Xid (PCI:0000:3a:00): 48, pid=1, name=a, DBE"),
                        parse_line("3,3,2000100,-;NVRM: Xid (PCI:0000:3a:00): 48, pid=1, name=a, DBE")])
    state = mon.cycle(snapshot())
    assert [(f["code"], f["count"], f["gpu"]["index"]) for f in state["faults"]] == [(48, 2, 2)]
    assert mon.counter.counts() == {("2", 13): 1, ("2", 48): 2}


def test_nvml_and_kernel_report_of_one_xid_count_once(tmp_path):
    mon, src = make(tmp_path)
    mon.cycle(snapshot())
    assert mon.feed_nvml({"code": 94, "index": 2, "uuid": "GPU-2", "mono_us": 5_000_000})
    src.batches.append([parse_line("3,9,5000300,-;NVRM: Xid (PCI:0000:3a:00): 94, pid=1, name=a, c")])
    mon.cycle(snapshot())
    assert mon.counter.counts() == {("2", 94): 1}


def test_a_clear_between_cycles_is_not_written_back(tmp_path):
    mon, src = make(tmp_path)
    src.batches.append([parse_line("3,1,1000000,-;NVRM: Xid (PCI:0000:3a:00): 95, pid=1, name=a, u")])
    assert mon.cycle(snapshot())["faults"]
    StateStore(str(tmp_path), "boot-1").update(lambda s: add_clear(s, "2", "ops", "operator clear"))
    mon.feed_nvml({"code": 95, "index": 2, "mono_us": 1_000_200})  # the same XID, late, via NVML
    assert mon.cycle(snapshot())["faults"] == []


def test_reset_seen_in_the_kernel_log_clears_reset_class_faults(tmp_path):
    mon, src = make(tmp_path)
    src.batches.append([parse_line("3,1,1000000,-;NVRM: Xid (PCI:0000:3a:00): 119, pid=1, name=a, t")])
    assert mon.cycle(snapshot())["faults"]
    src.batches.append([parse_line("3,2,9000000,-;NVRM: Xid (PCI:0000:3a:00): 154, GPU recovery "
                                   "action changed from 0x1 (GPU Reset Required) to 0x0 (None)")])
    state = mon.cycle(snapshot())
    assert state["faults"] == [] and state["clears"][-1]["reason"] == "gpu reset observed"


def test_ecc_fault_is_sticky_and_a_clear_holds_until_new_errors(tmp_path):
    mon, _ = make(tmp_path)
    assert [f["kind"] for f in mon.cycle(snapshot(unc=2))["faults"]] == ["ecc"]
    assert mon.cycle(snapshot(unc=0))["faults"]  # counters re-read as 0: still sticky
    StateStore(str(tmp_path), "boot-1").update(lambda s: add_clear(s, "all", "ops", "operator clear"))
    mon.state = StateStore(str(tmp_path), "boot-1").load()
    assert mon.cycle(snapshot(unc=0))["faults"] == []
    assert [f["volatile_uncorrected"] for f in mon.cycle(snapshot(unc=1))["faults"]] == [1]
