"""checks/gpu/gpu_nvlink.py and checks/gpu/gpu_pcie_link.py, outcome by outcome: inactive
links, GPUs without NVLink, PCIe width and generation, and each malformed field.

Expected values are written by hand from docs/gpu-snapshot.md (nvlink.supported and
nvlink.links[] of {link, active}; pcie.width_current/width_max/gen_current/gen_max), nvml.h
(nvmlDeviceGetNvLinkState per link; nvmlDeviceGetCurrPcieLinkWidth/MaxPcieLinkWidth) and the
`gpu.pcie` section of checks/policy_v1.yaml (a width below the maximum fails unless
width_below_max is warn; a lower generation at idle is power management).
"""
from typing import Any, Dict, List

import pytest

from agent.model import Outcome, Status
from checks.gpu.gpu_nvlink import GPU_NVLINK
from checks.gpu.gpu_pcie_link import GPU_PCIE_LINK
from tests.checks.snapshot_support import on_snapshot

BUS = "00000000:18:00.0"


def run(check, gpus: List[Dict[str, Any]], **gpu_policy: Any) -> Outcome:
    return on_snapshot(check, {"gpus": gpus}, overrides={"gpu": gpu_policy} if gpu_policy else None)


def links(*active: Any) -> Dict[str, Any]:
    return {"supported": True, "links": [{"link": i, "active": a} for i, a in enumerate(active)]}


def test_inactive_nvlinks_fail_naming_them_and_the_gpu():
    got = run(GPU_NVLINK, [{"index": 0, "pci_bus_id": BUS, "nvlink": links(True, False, None)}])
    assert (got.status, got.code) == (Status.FAIL, "nvlink-inactive")
    assert got.summary == f"GPU 0 ({BUS}) NVLink 1, 2 inactive (1 of 3 active)"
    assert got.details["per_gpu"] == {0: {"links": 3, "down": [1, 2]}}
    assert got.details["gpus_at_fault"] == [{"index": 0, "pci_bus_id": BUS}]


def test_gpus_without_nvlink_are_left_out():
    gpus: List[Dict[str, Any]] = [{"index": 0, "nvlink": links(True, True)},
            {"index": 1, "nvlink": {"supported": False, "links": [{"link": 0, "active": False}]}},
            {"index": 2, "nvlink": {"supported": True, "links": []}},
            {"index": 3, "nvlink": {"supported": True}},
            {"index": 4, "nvlink": None, "errors": {"nvlink": {"kind": "not_supported"}}}]
    got = run(GPU_NVLINK, gpus)
    assert (got.status, got.summary) == (
        Status.PASS, "every NVLink active on 1 GPU(s) (4 GPU(s) without NVLink state)")
    assert got.details["unsupported_gpus"] == [1, 2, 3, 4]
    assert got.details["per_gpu"] == {0: {"links": 2, "down": []}}


def test_no_gpu_with_nvlink_is_a_skip():
    got = run(GPU_NVLINK, [{"index": 0, "nvlink": {"supported": False}},
                           {"index": 1, "nvlink": {"supported": None, "links": []}}])
    assert (got.status, got.summary) == (Status.SKIP, "no NVLink on any GPU")


def test_a_lost_gpu_is_not_a_host_without_nvlink():
    got = run(GPU_NVLINK, [{"index": 0, "error": {"kind": "gpu_lost"}},
                           {"index": 1, "nvlink": {"supported": False}}])
    assert (got.status, got.summary) == (
        Status.SKIP, "NVLink state not supported on any GPU")
    assert got.details["lost_gpus"] == [0]


@pytest.mark.parametrize("nvlink,message", [
    ({"supported": True, "links": "18"}, "field gpus[0].nvlink.links is a string, expected a list"),
    ({"supported": True, "links": [{"link": 0, "active": True}, 7]},
     "field gpus[0].nvlink.links[1] is an integer, expected an object"),
    ({"supported": True, "links": [{"link": "0", "active": True}]},
     "field gpus[0].nvlink.links[0].link is a string, expected an integer"),
    ({"supported": True, "links": [{"link": 0, "active": "yes"}]},
     "field gpus[0].nvlink.links[0].active is a string, expected a boolean"),
    ({"supported": "yes", "links": [{"link": 0, "active": True}]},
     "field gpus[0].nvlink.supported is a string, expected a boolean"),
])
def test_a_malformed_nvlink_field_is_unknown_naming_it(nvlink, message):
    got = run(GPU_NVLINK, [{"index": 0, "nvlink": nvlink}, {"index": 1, "nvlink": links(True)}])
    assert (got.status, got.code) == (Status.UNKNOWN, "snapshot-malformed")
    assert got.summary == "cannot read NVLink state: malformed snapshot: " + message


def pcie(width: Any = 16, width_max: Any = 16, gen: Any = 5, gen_max: Any = 5) -> Dict[str, Any]:
    return {"width_current": width, "width_max": width_max, "gen_current": gen,
            "gen_max": gen_max}


@pytest.mark.parametrize("policy,status", [({}, Status.FAIL),
                                           ({"width_below_max": "fail"}, Status.FAIL),
                                           ({"width_below_max": "warn"}, Status.WARN)])
def test_a_link_below_its_width_follows_the_policy(policy, status):
    gpus = [{"index": 0, "pci_bus_id": BUS, "pcie": pcie(8, 16)}, {"index": 1, "pcie": pcie()}]
    got = run(GPU_PCIE_LINK, gpus, **({"pcie": policy} if policy else {}))
    assert (got.status, got.code, got.summary) == (status, "link-width-below-max",
                                                   f"GPU 0 ({BUS}) PCIe link x8 of x16")
    assert got.details["gpus_at_fault"] == [{"index": 0, "pci_bus_id": BUS}]


def test_a_lower_generation_passes_naming_the_gpus():
    gpus = [{"index": 0, "pcie": pcie(gen=1)}, {"index": 1, "pcie": pcie()},
            {"index": 2, "pcie": pcie(gen=4, gen_max=5)}]
    got = run(GPU_PCIE_LINK, gpus)
    assert (got.status, got.summary) == (
        Status.PASS, "3 GPU(s) at full PCIe link width; GPU 0, 2 at a lower generation (normal "
        "at idle)")
    assert got.details["gen_downshifted_gpus"] == [0, 2]
    assert got.details["per_gpu"][0] == pcie(gen=1)


def test_an_unread_width_or_generation_is_not_judged():
    gpus = [{"index": 0, "pcie": pcie(width=None, width_max=16, gen=5, gen_max=None)},
            {"index": 1, "pcie": pcie(width=8, width_max=None)}]
    got = run(GPU_PCIE_LINK, gpus)
    assert (got.status, got.summary) == (Status.PASS, "2 GPU(s) at full PCIe link width")
    assert got.details["gen_downshifted_gpus"] == []


@pytest.mark.parametrize("field", ["width_current", "width_max", "gen_current", "gen_max"])
def test_a_malformed_pcie_field_is_unknown_naming_it(field):
    link = dict(pcie(), **{field: "x16"})
    got = run(GPU_PCIE_LINK, [{"index": 0, "pcie": link}])
    assert (got.status, got.code) == (Status.UNKNOWN, "snapshot-malformed")
    assert got.summary == (f"cannot read PCIe link: malformed snapshot: field gpus[0].pcie."
                           f"{field} is a string, expected an integer")


@pytest.mark.parametrize("check,bad,good,summary", [
    (GPU_NVLINK, {"index": 0, "nvlink": {"supported": True, "links": 5}},
     {"index": 1, "nvlink": links(True, False)}, "GPU 1 NVLink 1 inactive (1 of 2 active)"),
    (GPU_PCIE_LINK, {"index": 0, "pcie": pcie(width="x16")},
     {"index": 1, "pcie": pcie(4, 16)}, "GPU 1 PCIe link x4 of x16"),
])
def test_the_gpu_after_a_malformed_one_is_still_judged(check, bad, good, summary):
    got = run(check, [bad, good])
    assert (got.status, got.summary) == (Status.FAIL, summary)
