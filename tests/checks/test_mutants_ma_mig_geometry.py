"""checks/gpu/mig_geometry.py, outcome by outcome: the whole Outcome (status, code, summary,
details.per_gpu) for MIG disabled, a GPU without MIG, devices unread or malformed, several
profiles, and GPUs the config does not name.

Expected values are written by hand from the module docstring (a GPU's geometry is one
profile per distinct gpu_instance_id; an index key beats a product key; order does not matter)
and docs/gpu-snapshot.md (gpus[i].mig.current, mig.devices[] of {profile, gpu_instance_id},
errors["mig.devices"]).
"""
from typing import Any, Dict, List, Optional

import pytest

from agent.model import Status
from checks.gpu.mig_geometry import MIG_GEOMETRY
from tests.checks.snapshot_support import on_snapshot

H100 = "NVIDIA H100 80GB HBM3"


def dev(gi: Optional[int], profile: Any) -> Dict[str, Any]:
    return {"profile": profile, "gpu_instance_id": gi}


def gpu(i: int, devices: Any = None, current: Any = "enabled", bus: bool = False,
        **more: Any) -> Dict[str, Any]:
    mig: Dict[str, Any] = {"current": current, "pending": current}
    if devices is not None:
        mig["devices"] = devices
    g = {"index": i, "name": H100, "mig": mig, **more}
    if bus:
        g["pci_bus_id"] = f"00000000:{i + 16:02X}:00.0"
    return g


def run(gpus: List[Dict[str, Any]], geometry: Dict[str, List[str]]):
    section: Any = {"mig_geometry": geometry}  # validated by Config, as a config file is
    return on_snapshot(MIG_GEOMETRY, {"gpus": gpus}, version=2, gpu=section)


def test_a_stated_gpu_with_mig_disabled_fails_naming_what_is_stated():
    out = run([gpu(0, current="disabled", bus=True)], {"0": ["3g.40gb", "1g.10gb", "3g.40gb"]})
    assert (out.status, out.code) == (Status.FAIL, "mig-geometry-mig-disabled")
    assert out.summary == ("GPU 0 (00000000:10:00.0) has MIG disabled; gpu.mig_geometry[0] "
                           "states 1 x 1g.10gb, 2 x 3g.40gb")
    assert out.details["per_gpu"] == {0: {"stated_by": "gpu.mig_geometry[0]",
                                          "want": ["1g.10gb", "3g.40gb", "3g.40gb"]}}
    assert out.details["gpus_at_fault"] == [{"index": 0, "pci_bus_id": "00000000:10:00.0"}]


def test_an_unread_mig_mode_is_named_unknown():
    out = run([gpu(0, current=None)], {"0": ["7g.80gb"]})
    assert (out.status, out.code, out.summary) == (
        Status.FAIL, "mig-geometry-mig-disabled",
        "GPU 0 has MIG unknown; gpu.mig_geometry[0] states 1 x 7g.80gb")


def test_a_met_geometry_passes_with_what_each_gpu_has():
    devices = [dev(3, "2g.20gb"), dev(1, "3g.40gb"), dev(None, "1g.10gb"), dev(None, "1g.10gb")]
    out = run([gpu(0, devices), gpu(1, [dev(0, "7g.80gb")])],
              {"0": ["1g.10gb", "3g.40gb", "1g.10gb", "2g.20gb"]})
    assert (out.status, out.summary) == (Status.PASS, "MIG geometry as stated on 1 GPU(s)")
    assert out.details["per_gpu"] == {0: {
        "stated_by": "gpu.mig_geometry[0]", "want": ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"],
        "have": ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]}}


def test_an_unmet_geometry_lists_both_sides_counted():
    devices = [dev(1, "3g.40gb"), dev(2, "2g.20gb"), dev(3, "1g.10gb"), dev(4, "1g.10gb")]
    out = run([gpu(0, devices, bus=True)], {H100: ["3g.40gb", "3g.40gb"]})
    assert (out.status, out.code) == (Status.FAIL, "mig-geometry-unmet")
    assert out.summary == ("GPU 0 (00000000:10:00.0) MIG geometry is 2 x 1g.10gb, 1 x 2g.20gb, "
                           f"1 x 3g.40gb; gpu.mig_geometry['{H100}'] wants 2 x 3g.40gb")
    assert out.details["per_gpu"][0]["stated_by"] == f"gpu.mig_geometry['{H100}']"


@pytest.mark.parametrize("errors,summary", [
    ({}, "GPU 0 mig.devices: missing"),
    ({"mig.devices": "boom"}, "GPU 0 mig.devices: missing"),
    ({"mig.devices": {"kind": "nvml_error"}}, "GPU 0 mig.devices: nvml_error"),
    ({"mig.devices": {"kind": "nvml_error", "message": "m" * 300}},
     f"GPU 0 mig.devices: nvml_error ({'m' * 200})"),
])
def test_devices_not_read_are_unknown_with_nvmls_error(errors, summary):
    out = run([gpu(0, errors=errors)], {"0": ["7g.80gb"]})
    assert (out.status, out.code, out.summary) == (
        Status.UNKNOWN, "field-unreadable", "cannot read MIG geometry: " + summary)
    assert out.details["per_gpu"] == {0: {"stated_by": "gpu.mig_geometry[0]",
                                          "want": ["7g.80gb"]}}


@pytest.mark.parametrize("mig,message", [
    ({"current": 1}, "field gpus[0].mig.current is an integer, expected a string"),
    ({"current": "enabled", "devices": {"a": 1}},
     "field gpus[0].mig.devices is an object, expected a list of objects"),
    ({"current": "enabled", "devices": [{"gpu_instance_id": "1", "profile": "7g.80gb"}]},
     "field gpus[0].mig.devices[0].gpu_instance_id is a string, expected an integer"),
    ({"current": "enabled", "devices": [dev(1, "7g.80gb"), dev(2, 7)]},
     "field gpus[0].mig.devices[1].profile is an integer, expected a string"),
])
def test_a_malformed_mig_field_is_unknown_naming_it(mig, message):
    out = run([{"index": 0, "name": H100, "mig": mig}], {"0": ["7g.80gb"]})
    assert (out.status, out.code, out.summary) == (
        Status.UNKNOWN, "snapshot-malformed", "cannot read MIG geometry: malformed snapshot: "
        + message)


def test_a_long_profile_name_is_bounded_in_the_summary():
    out = run([gpu(0, [dev(0, "p" * 60)])], {"0": ["7g.80gb"]})
    assert out.summary == (f"GPU 0 MIG geometry is 1 x {'p' * 40}; gpu.mig_geometry[0] wants "
                           "1 x 7g.80gb")


def test_a_product_key_names_a_gpu_by_its_name_and_a_non_list_value_names_none():
    gpus = [gpu(0, [dev(0, "7g.80gb")]), gpu(1, [dev(0, "7g.80gb")], name="NVIDIA A100")]
    out = run(gpus, {H100: ["7g.80gb"]})
    assert (out.status, out.summary) == (Status.PASS, "MIG geometry as stated on 1 GPU(s)")
    assert list(out.details["per_gpu"]) == [0]


def test_a_gpu_without_mig_stated_by_product_and_an_absent_index_both_fail():
    unsupported = {"index": 0, "name": "NVIDIA L40S", "mig": None,
                   "errors": {"mig": {"kind": "not_supported"}}}
    out = run([unsupported, gpu(1, [dev(0, "7g.80gb")])],
              {"NVIDIA L40S": ["1g.10gb"], "1": ["7g.80gb"], "12": ["1g.10gb"]})
    assert (out.status, out.code) == (Status.FAIL, "mig-geometry-mig-disabled")
    assert out.summary == ("GPU 0 cannot run MIG (NVML: not supported); gpu.mig_geometry"
                           "['NVIDIA L40S'] states 1 x 1g.10gb; gpu.mig_geometry[12]: NVML "
                           "reports no GPU 12 (2 GPU(s))")
    assert out.details["per_gpu"][0] == {"stated_by": "gpu.mig_geometry['NVIDIA L40S']",
                                         "want": ["1g.10gb"]}
    assert out.details["unsupported_gpus"] == []


def test_no_gpu_named_lists_what_is_stated():
    out = run([gpu(0, [dev(0, "7g.80gb")])], {"NVIDIA B200": ["7g.180gb"], "5x": ["1g.10gb"]})
    assert (out.status, out.summary) == (
        Status.SKIP, "no GPU on this host is named in gpu.mig_geometry (by index or product "
        "name)")
    assert out.details == {"stated": ["5x", "NVIDIA B200"]}


UNMET_1 = "GPU 1 MIG geometry is 1 x 1g.10gb; gpu.mig_geometry[1] wants 1 x 7g.80gb"


@pytest.mark.parametrize("first,summary", [
    # each GPU's finding is its own: the GPU after it is still judged
    (gpu(0, current="disabled"), "GPU 0 has MIG disabled; gpu.mig_geometry[0] states 1 x "
     "7g.80gb; " + UNMET_1),
    (gpu(0), UNMET_1),  # devices unread: unknown, but the failure of GPU 1 is reported
    ({"index": 0, "name": H100, "mig": {"current": 1}}, UNMET_1),  # malformed
])
def test_the_gpu_after_a_finding_is_still_judged(first, summary):
    out = run([first, gpu(1, [dev(0, "1g.10gb")])], {"0": ["7g.80gb"], "1": ["7g.80gb"]})
    assert (out.status, out.summary) == (Status.FAIL, summary)


def test_devices_of_a_gpu_with_mig_disabled_are_not_read():
    out = run([gpu(0, devices="not a list", current="disabled")], {"0": ["7g.80gb"]})
    assert (out.status, out.code) == (Status.FAIL, "mig-geometry-mig-disabled")


def test_a_gpu_name_of_the_wrong_type_matches_no_product_key():
    out = run([gpu(0, [dev(0, "7g.80gb")]), gpu(1, [dev(0, "1g.10gb")], name=["x"])],
              {"0": ["7g.80gb"]})
    assert (out.status, out.summary) == (Status.PASS, "MIG geometry as stated on 1 GPU(s)")
