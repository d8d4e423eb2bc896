"""driver-open-module's branches the mutation tier found judged only by their verdict: the
not-applicable summaries, the operator-owned driver (judged only with policy v2's
operator.judge_managed), an unreadable module version, and the GPU entries its details carry
(a GPU NVML lists without a PCI bus id is named by its NVML index; a PCI GPU NVML also lists is
marked in_nvml). NVML bus ids have an 8-digit domain ("00000000:1B:00.0", nvml.h
nvmlPciInfo_t.busId), udev slots a 4-digit one ("0000:1b:00.0"). Expected values by hand."""
from agent.model import Status
from checks.driver.common import VERSION_UNREADABLE
from checks.driver.open_module import DRIVER_OPEN_MODULE, OPEN_MODULE_REQUIRED
from checks.policy import ResolvedPolicy, load_policy
from tests.checks.test_driver_open_module import PROPRIETARY, host, pci_dev, run


def _operator(h, judge_managed: bool, path: str = "operator-clusterpolicy"):
    overrides = {"driver": {"managed_by_operator": True},
                 "operator": {"judge_managed": judge_managed}}
    return DRIVER_OPEN_MODULE.run(h, ResolvedPolicy(load_policy(2, overrides), path))


def test_no_gpu_named_is_not_applicable_with_that_summary(tmp_path):
    out = run(host(tmp_path, PROPRIETARY, [pci_dev("0000:1b:00.0", "2901")]), version=1)
    assert out.summary == "policy.driver.require_open_module names no GPU"


def test_the_operators_driver_unjudged_is_not_applicable_naming_the_path(tmp_path):
    out = _operator(host(tmp_path, PROPRIETARY, [pci_dev("0000:1b:00.0", "2901")]), False)
    assert out.status == Status.SKIP
    assert out.summary == "the GPU Operator installs the driver on the operator-clusterpolicy path"


def test_the_operators_driver_judged_and_a_host_driver_unaffected_by_judge_managed(tmp_path):
    # judge_managed on: the operator's own module is judged like a host's (a B200, device id
    # 2901, on the proprietary module fails); off, a path the operator does not own is judged.
    judged = _operator(host(tmp_path / "a", PROPRIETARY, [pci_dev("0000:1b:00.0", "2901")]), True)
    assert (judged.status, judged.code) == (Status.FAIL, OPEN_MODULE_REQUIRED)
    own = _operator(host(tmp_path / "b", PROPRIETARY, [pci_dev("0000:1b:00.0", "2901")]), False,
                    path="dra")
    assert (own.status, own.code) == (Status.FAIL, OPEN_MODULE_REQUIRED)


def test_an_unreadable_version_is_unknown_naming_the_flavour(tmp_path):
    out = run(host(tmp_path, "garbage\n", [pci_dev("0000:1b:00.0", "2901")]))
    assert (out.status, out.code) == (Status.UNKNOWN, VERSION_UNREADABLE)
    assert out.summary.startswith("cannot read the kernel module flavour: ")


def test_an_nvml_gpu_without_a_bus_id_is_named_by_its_index(tmp_path):
    out = run(host(tmp_path, PROPRIETARY, None, [{"index": 3, "name": "NVIDIA B200"}]))
    assert (out.status, out.code) == (Status.FAIL, OPEN_MODULE_REQUIRED)
    assert out.details["gpus_requiring_open"] == [
        {"slot": "index 3", "pci_id": None, "name": "NVIDIA B200", "in_nvml": True}]


def test_a_pci_gpu_nvml_also_lists_is_marked_in_nvml(tmp_path):
    out = run(host(tmp_path, PROPRIETARY, [pci_dev("0000:1b:00.0", "2901")],
                   [{"index": 0, "name": "NVIDIA B200", "pci_bus_id": "00000000:1B:00.0"},
                    {"index": 1, "name": "NVIDIA H100 80GB HBM3",
                     "pci_bus_id": "00000000:2A:00.0"}]))
    assert (out.status, out.code) == (Status.FAIL, OPEN_MODULE_REQUIRED)
    assert [(g["slot"], g["name"], g["in_nvml"]) for g in out.details["gpus_requiring_open"]] == [
        ("0000:1b:00.0", "NVIDIA B200", True)]
