"""checks/gpu/gpu_sku.py, outcome by outcome: a GPU the table does not know, a GPU without a
bus id, each field of the wrong shape, absent sub-fields, rounding of the framebuffer, the
code of each finding and which GPUs it names.

Expected values are written by hand from the sources the check cites: nvml.h
nvmlPciInfo_t.pciDeviceId (device id in the upper 16 bits, vendor 0x10de in the lower);
checks/gpu/sku_table.py (0x2330 "H100 SXM5 80GB", sxm, 81559 MiB as NVML reports it: "FB
Memory Usage / Total" of the gpud H100 capture); the snapshot layout of docs/gpu-snapshot.md
(memory.total_bytes, nvlink.links, power_limit.enforced_mw, applications_clocks.*_mhz).
"""
from typing import Any, Dict, List, Optional

import pytest

from agent.model import Outcome, Status
from checks.gpu.gpu_sku import GPU_SKU
from tests.checks.snapshot_support import on_snapshot

H100 = 0x233010DE  # 10de:2330, H100 SXM5 80GB
H200 = 0x233510DE  # 10de:2335, H200 SXM 141GB
UNKNOWN = 0x123410DE  # 10de:1234, not in the table
MIB = 1 << 20
BUS0 = "00000000:18:00.0"
BUS1 = "00000000:2A:00.0"
PIN_H100 = {"product": "H100 SXM5 80GB"}


def gpu(index: int, device: int = H100, bus: Optional[str] = None, **fields: Any
        ) -> Dict[str, Any]:
    # the table's 81559 MiB unless a test says otherwise: the framebuffer is always judged
    g: Dict[str, Any] = {"index": index, "pci_device_id": device,
                         "memory": {"total_bytes": 81559 * MIB}}
    if bus:
        g["pci_bus_id"] = bus
    g.update(fields)
    return g


def run(gpus: List[Dict[str, Any]], *products: Dict[str, Any]) -> Outcome:
    return on_snapshot(GPU_SKU, {"gpus": gpus}, version=2,
                       overrides={"gpu": {"sku": {"products": list(products)}}})


def test_a_gpu_of_a_product_the_table_does_not_know_is_named_unknown_among_the_pinned():
    got = run([gpu(0, bus=BUS0), gpu(1, UNKNOWN, bus=BUS1)], PIN_H100)
    assert (got.status, got.code) == (Status.FAIL, "sku-mixed")
    assert got.summary == ("GPU 1 (00000000:2A:00.0) unknown: product unknown (10de:1234), "
                           "want H100 SXM5 80GB (10de:2330, sxm), the product of 1 GPU(s)")
    assert got.details["mismatches"] == [{
        "gpu": 1, "pci_bus_id": BUS1, "product": "unknown", "field": "product",
        "want": "H100 SXM5 80GB (10de:2330, sxm), the product of 1 GPU(s)",
        "have": "unknown (10de:1234)", "code": "sku-mixed"}]
    # the failure is wholly GPU 1's: agent/gpu_health.py counts it unhealthy
    assert got.details["gpus_at_fault"] == [{"index": 1, "pci_bus_id": BUS1}]


def test_no_gpu_of_a_pinned_product_lists_unknown_products_by_name():
    got = run([gpu(0, UNKNOWN)], PIN_H100)
    assert (got.status, got.code) == (Status.FAIL, "sku-product-not-pinned")
    assert got.summary == ("GPU 0: unknown (10de:1234); policy gpu.sku pins H100 SXM5 80GB")
    assert got.details["mismatches"] == [{
        "gpu": 0, "pci_bus_id": None, "product": "unknown", "field": "product",
        "want": "one of H100 SXM5 80GB", "have": "unknown (10de:1234)",
        "code": "sku-product-not-pinned"}]


def test_a_finding_on_a_gpu_without_a_bus_id_records_no_bus_and_names_the_gpu():
    got = run([gpu(0, vbios_version="96.00.99.00.01")],
              dict(PIN_H100, vbios_allowed=["96.00.74.00.01", "96.00.74.00.02"]))
    assert (got.status, got.code) == (Status.FAIL, "sku-vbios-not-allowed")
    assert got.summary == ("GPU 0 H100 SXM5 80GB: vbios_version 96.00.99.00.01, want one of "
                           "96.00.74.00.01, 96.00.74.00.02")
    assert got.details["mismatches"] == [{
        "gpu": 0, "pci_bus_id": None, "product": "H100 SXM5 80GB", "field": "vbios_version",
        "want": "one of 96.00.74.00.01, 96.00.74.00.02", "have": "96.00.99.00.01",
        "code": "sku-vbios-not-allowed"}]
    assert got.details["gpus_at_fault"] == [{"index": 0}]


def test_a_wrong_nvlink_count_fails_with_its_own_code():
    got = run([gpu(0, bus=BUS0, nvlink={"links": [{"id": i} for i in range(12)]})],
              dict(PIN_H100, nvlink_links=18))
    assert (got.status, got.code) == (Status.FAIL, "sku-nvlink-count")
    assert got.summary == "GPU 0 (00000000:18:00.0) H100 SXM5 80GB: NVLinks 12, want 18"
    assert got.details["gpus_at_fault"] == [{"index": 0, "pci_bus_id": BUS0}]


def test_framebuffer_is_floored_to_whole_mib_as_nvidia_smi_prints_it():
    # one byte short of the table's 81559 MiB: NVML's floor is 81558 MiB
    got = run([gpu(0, memory={"total_bytes": 81559 * MIB - 1})], PIN_H100)
    assert (got.status, got.code) == (Status.FAIL, "sku-memory-below")
    assert got.summary == "GPU 0 H100 SXM5 80GB: memory MiB 81558, want >= 81559"
    assert got.details["mismatches"][0]["have"] == 81558
    # exactly the table's figure passes
    ok = run([gpu(0, memory={"total_bytes": 81559 * MIB})], PIN_H100)
    assert (ok.status, ok.summary) == (Status.PASS,
                                       "1 GPU(s) are H100 SXM5 80GB, as pinned (policy gpu.sku)")


@pytest.mark.parametrize("fields,pin", [
    ({"memory": {}}, {}),  # no total_bytes: the framebuffer is not judged
    ({"power_limit": {}}, {"power_limit_w": {"min": 700}}),
    ({"applications_clocks": {}}, {"applications_clocks_mhz": {"graphics": {"min": 1980}}}),
    ({"applications_clocks": {"graphics_mhz": 1980}},
     {"applications_clocks_mhz": {"memory": {"max": 2619}}}),
])
def test_an_absent_sub_field_is_not_judged(fields, pin):
    got = run([gpu(0, **fields)], dict(PIN_H100, **pin))
    assert (got.status, got.summary) == (Status.PASS,
                                         "1 GPU(s) are H100 SXM5 80GB, as pinned (policy gpu.sku)")


@pytest.mark.parametrize("fields,pin,message", [
    ({"memory": [1]}, {}, "field gpus[0].memory is a list, expected an object"),
    ({"memory": {"total_bytes": "80GB"}}, {},
     "field gpus[0].memory.total_bytes is a string, expected an integer"),
    ({"nvlink": {"links": 18}}, {"nvlink_links": 18},
     "field gpus[0].nvlink is an object, expected an object with a links list"),
    ({"nvlink": "18"}, {"nvlink_links": 18},
     "field gpus[0].nvlink is a string, expected an object with a links list"),
    ({"power_limit": 700000}, {"power_limit_w": {"min": 700}},
     "field gpus[0].power_limit is an integer, expected an object"),
    ({"power_limit": {"enforced_mw": "700 W"}}, {"power_limit_w": {"min": 700}},
     "field gpus[0].power_limit.enforced_mw is a string, expected an integer"),
    ({"applications_clocks": {"memory_mhz": True}},
     {"applications_clocks_mhz": {"memory": {"min": 2619}}},
     "field gpus[0].applications_clocks.memory_mhz is a boolean, expected an integer"),
])
def test_a_field_of_the_wrong_shape_is_unknown_naming_it(fields, pin, message):
    got = run([gpu(0, **fields)], dict(PIN_H100, **pin))
    assert (got.status, got.code) == (Status.UNKNOWN, "snapshot-malformed")
    assert got.summary == "cannot read GPU SKU: malformed snapshot: " + message


def test_power_in_milliwatts_is_judged_in_watts():
    # nvmlDeviceGetEnforcedPowerLimit reports mW: 699,500 mW is 699.5 W, under a 700 W floor
    got = run([gpu(0, power_limit={"enforced_mw": 699500})],
              dict(PIN_H100, power_limit_w={"min": 700, "max": 700}))
    assert (got.status, got.code) == (Status.FAIL, "sku-power-limit")
    assert got.summary == "GPU 0 H100 SXM5 80GB: power limit W (enforced) 699.5, want >= 700"
    assert got.details["mismatches"][0]["have"] == 699.5


def test_applications_memory_clock_below_its_floor_fails_when_nothing_else_is_bounded():
    # power and graphics clock unbounded (not judged), memory clock bounded: the memory
    # clock is still judged
    got = run([gpu(0, applications_clocks={"graphics_mhz": 1980, "memory_mhz": 1593})],
              dict(PIN_H100, applications_clocks_mhz={"memory": {"min": 2619}}))
    assert (got.status, got.code) == (Status.FAIL, "sku-clocks")
    assert got.summary == ("GPU 0 H100 SXM5 80GB: applications clock memory MHz 1593, "
                           "want >= 2619")
    assert got.details["mismatches"][0]["field"] == "applications clock memory MHz"


def test_a_tie_between_pinned_products_goes_to_the_one_pinned_first():
    pins = (PIN_H100, {"product": "H200 SXM 141GB"})
    got = run([gpu(0, H200, memory={"total_bytes": 143771 * MIB}), gpu(1, H100)], *pins)
    assert (got.status, got.code) == (Status.FAIL, "sku-mixed")
    assert got.summary == ("GPU 0 H200 SXM 141GB: product H200 SXM 141GB (10de:2335, sxm), "
                           "want H100 SXM5 80GB (10de:2330, sxm), the product of 1 GPU(s)")
    assert (got.details["host_product"], got.details["pinned"]) == (
        "H100 SXM5 80GB", ["H100 SXM5 80GB", "H200 SXM 141GB"])


def test_a_host_of_an_unpinned_product_names_every_pinned_one():
    pins = (PIN_H100, {"product": "H200 SXM 141GB"})
    got = run([gpu(0, UNKNOWN), gpu(1, UNKNOWN)], *pins)
    assert (got.status, got.code) == (Status.FAIL, "sku-product-not-pinned")
    assert got.summary == ("GPU 0, 1: unknown (10de:1234); policy gpu.sku pins H100 SXM5 "
                           "80GB, H200 SXM 141GB")
    assert got.details["mismatches"][1] == {
        "gpu": 1, "pci_bus_id": None, "product": "unknown", "field": "product",
        "want": "one of H100 SXM5 80GB, H200 SXM 141GB", "have": "unknown (10de:1234)",
        "code": "sku-product-not-pinned"}
    assert (got.details["host_product"], got.details["pinned"]) == (
        None, ["H100 SXM5 80GB", "H200 SXM 141GB"])


def test_a_gpu_nvml_cannot_identify_leaves_the_sku_unknown():
    unsupported = {"index": 1, "pci_device_id": None,
                   "errors": {"pci_device_id": {"kind": "not_supported"}}}
    got = run([gpu(0), unsupported], PIN_H100)
    assert (got.status, got.code) == (Status.UNKNOWN, "field-unreadable")
    assert got.summary == "cannot read GPU SKU: GPU 1 pci_device_id: not_supported"
    # judged as unreadable, not as a GPU without the field
    assert got.details["unsupported_gpus"] == []


def test_a_host_whose_only_gpu_is_lost_has_no_sku_to_check():
    got = run([{"index": 0, "error": {"kind": "gpu_lost"}}], PIN_H100)
    assert (got.status, got.summary) == (
        Status.SKIP, "no readable GPU to check GPU SKU on; GPU 0 lost (see gpu-count)")


@pytest.mark.parametrize("fields,summary", [
    # no memory field and no error recorded for it: "missing"
    ({"memory": None}, "cannot read GPU SKU: GPU 0 memory: missing"),
    # errors.memory of the wrong shape is no error kind: still "missing"
    ({"memory": None, "errors": {"memory": "nvml_error"}},
     "cannot read GPU SKU: GPU 0 memory: missing"),
    ({"memory": None, "errors": {"memory": {"kind": "unknown_error"}}},
     "cannot read GPU SKU: GPU 0 memory: unknown_error"),
])
def test_an_unread_field_of_the_pinned_product_is_unknown(fields, summary):
    got = run([gpu(0, **fields)], PIN_H100)
    assert (got.status, got.code, got.summary) == (Status.UNKNOWN, "field-unreadable", summary)


def test_a_long_firmware_version_is_bounded_to_60_characters():
    long = "9" * 70
    got = run([gpu(0, vbios_version=long)], dict(PIN_H100, vbios_allowed=["96.00.74.00.01"]))
    assert got.details["mismatches"][0]["have"] == "9" * 60
    assert got.summary == ("GPU 0 H100 SXM5 80GB: vbios_version " + "9" * 60
                           + ", want one of 96.00.74.00.01")
