"""driver-open-module's summaries and details, whole: the open module with no GPU that needs it,
a failure naming at most 8 GPUs ("and N more"), how many of them NVML lists, the pass and the
input-missing wordings with their details, a PCI inventory without any display device, and
an NVML index cut to 8 characters. Policy v2 holds 10de:2901 (GB100, B200 in pci.ids) and the
B200 product to the open module (NVIDIA Technical Blog, "NVIDIA Transitions Fully Towards
Open-Source GPU Kernel Modules"); NVML bus ids have an 8-digit domain ("00000000:1B:00.0",
nvml.h nvmlPciInfo_t.busId), udev slots a 4-digit one. Expected values by hand from
checks/driver/open_module.py."""
from agent.model import SKIP_INPUT_MISSING, Status
from checks.driver.open_module import OPEN_MODULE_REQUIRED
from tests.checks.test_driver_open_module import OPEN, PROPRIETARY, host, pci_dev, run

HEAD = ("proprietary kernel module 580.173.02 loaded; {n} GPU(s) require NVIDIA's open kernel "
        "module (policy.driver.require_open_module): ")


def _slots(n):
    return [f"0000:{i + 1:02x}:00.0" for i in range(n)]


def test_the_open_module_where_no_gpu_needs_it_says_so(tmp_path):
    out = run(host(tmp_path, OPEN, [pci_dev("0000:1a:00.0", "2330")]))
    assert out.status == Status.PASS
    assert out.summary == "open kernel module 580.173.02 loaded; no GPU here requires it"
    assert dict(out.details) == {"flavor": "open", "version": "580.173.02",
                                 "gpus_requiring_open": [], "sources": ["PCI"]}


def test_nine_gpus_name_the_first_eight_and_one_more(tmp_path):
    slots = _slots(9)
    out = run(host(tmp_path, PROPRIETARY, [pci_dev(s, "2901") for s in slots]))
    assert (out.status, out.code) == (Status.FAIL, OPEN_MODULE_REQUIRED)
    named = ", ".join(f"{s} (10de:2901)" for s in slots[:8])
    assert out.summary == HEAD.format(n=9) + named + " and 1 more"
    assert out.details["flavor"] == "proprietary" and out.details["version"] == "580.173.02"
    assert len(out.details["gpus_requiring_open"]) == 9


def test_eight_gpus_are_all_named_with_nothing_after(tmp_path):
    slots = _slots(8)
    out = run(host(tmp_path, PROPRIETARY, [pci_dev(s, "2901") for s in slots]))
    assert out.summary == HEAD.format(n=8) + ", ".join(f"{s} (10de:2901)" for s in slots)


def test_a_gpu_nvml_does_not_list_is_counted(tmp_path):
    # Two B200s on PCI; NVML lists only the first (the other did not initialise).
    pci = [pci_dev("0000:1a:00.0", "2901"), pci_dev("0000:1b:00.0", "2901")]
    gpus = [{"index": 0, "name": "NVIDIA B200", "pci_bus_id": "00000000:1A:00.0"}]
    out = run(host(tmp_path, PROPRIETARY, pci, gpus))
    assert out.summary == (
        HEAD.format(n=2) + "0000:1a:00.0 (10de:2901, NVIDIA B200), 0000:1b:00.0 (10de:2901); "
        "NVML lists 1 of them: a GPU the proprietary module cannot drive does not initialise")
    assert out.details["sources"] == ["PCI", "NVML"]


def test_every_gpu_in_nvml_adds_nothing_about_nvml(tmp_path):
    pci = [pci_dev("0000:1a:00.0", "2901")]
    gpus = [{"index": 0, "name": "NVIDIA B200", "pci_bus_id": "00000000:1A:00.0"}]
    out = run(host(tmp_path, PROPRIETARY, pci, gpus))
    assert out.summary == HEAD.format(n=1) + "0000:1a:00.0 (10de:2901, NVIDIA B200)"


def test_no_inventory_and_nvml_listing_none_is_input_missing_with_details(tmp_path):
    out = run(host(tmp_path, PROPRIETARY, None, []))
    assert (out.status, out.skip) == (Status.SKIP, SKIP_INPUT_MISSING)
    assert out.summary == ("proprietary kernel module 580.173.02 loaded; the PCI devices were not "
                           "captured and NVML lists no GPU: nothing to judge the GPUs by")
    assert dict(out.details) == {"flavor": "proprietary", "version": "580.173.02",
                                 "gpus_requiring_open": [], "sources": ["NVML"]}


def test_a_pci_inventory_without_gpus_is_judged_none_of_zero(tmp_path):
    # An inventory was captured and holds no display device: "none here" is known, not a guess.
    nic = {"slot": "0000:3b:00.0", "vendor": "15b3", "device": "1021", "class": "020000"}
    out = run(host(tmp_path, PROPRIETARY, [nic]))
    assert out.status == Status.PASS
    assert out.summary == ("proprietary kernel module 580.173.02 loaded; none of the 0 GPU(s) "
                           "requires the open module (read from PCI)")
    assert dict(out.details) == {"flavor": "proprietary", "version": "580.173.02",
                                 "gpus_requiring_open": [], "sources": ["PCI"]}


def test_an_nvml_index_is_cut_to_eight_characters(tmp_path):
    out = run(host(tmp_path, PROPRIETARY, None, [{"index": 123456789, "name": "NVIDIA B200"}]))
    assert out.details["gpus_requiring_open"][0]["slot"] == "index 12345678"
