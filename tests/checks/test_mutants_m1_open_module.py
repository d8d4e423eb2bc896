"""driver-open-module's branches the mutation tier found judged only by their verdict: the
not-applicable summaries, the operator-owned driver (judged only with policy v2's
operator.judge_managed), an unreadable module version, and the GPU entries its details carry
(a GPU NVML lists without a PCI bus id is named by its NVML index; a PCI GPU NVML also lists is
marked in_nvml). NVML bus ids have an 8-digit domain ("00000000:1B:00.0", nvml.h
nvmlPciInfo_t.busId), udev slots a 4-digit one ("0000:1b:00.0"). Expected values by hand."""
from agent.model import SKIP_INPUT_MISSING, Status
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
    # The H100 first: a GPU no product names must not end the walk over NVML's list.
    out = run(host(tmp_path, PROPRIETARY, [pci_dev("0000:1b:00.0", "2901")],
                   [{"index": 1, "name": "NVIDIA H100 80GB HBM3",
                     "pci_bus_id": "00000000:2A:00.0"},
                    {"index": 0, "name": "NVIDIA B200", "pci_bus_id": "00000000:1B:00.0"},
                    {"index": 2, "name": "NVIDIA GB200", "pci_bus_id": "00000000:3C:00.0"}]))
    assert (out.status, out.code) == (Status.FAIL, OPEN_MODULE_REQUIRED)
    assert [(g["slot"], g["name"], g["in_nvml"]) for g in out.details["gpus_requiring_open"]] == [
        ("0000:1b:00.0", "NVIDIA B200", True), ("0000:3c:00.0", "NVIDIA GB200", True)]


def test_a_pci_gpu_nvml_lists_under_an_unlisted_name_is_still_in_nvml(tmp_path):
    # PCI device id 2901 names it; NVML's name for it is one no product entry matches.
    out = run(host(tmp_path, PROPRIETARY, [pci_dev("0000:1b:00.0", "2901")],
                   [{"index": 0, "name": "NVIDIA Graphics Device",
                     "pci_bus_id": "00000000:1B:00.0"}]))
    assert out.details["gpus_requiring_open"] == [
        {"slot": "0000:1b:00.0", "pci_id": "10de:2901", "name": None, "in_nvml": True}]


def test_bundle_strings_are_bounded_and_a_slotless_device_is_question_mark(tmp_path):
    # host.json is input: a slot is cut to 16 characters (a PCI address, "0000:1b:00.0", is
    # 12), an NVML name to 80, and a device without a slot is "?".
    long_name = "NVIDIA B200 " + "x" * 100
    dev = pci_dev("0000:1b:00.0-and-more", "2901")
    slotless = {k: v for k, v in pci_dev("", "2901").items() if k != "slot"}
    out = run(host(tmp_path, PROPRIETARY, [dev, slotless],
                   [{"index": 0, "name": long_name}]))
    gpus = out.details["gpus_requiring_open"]
    assert [g["slot"] for g in gpus] == ["0000:1b:00.0-and", "?", "index 0"]
    assert gpus[2]["name"] == long_name[:80]


def _snap_host(tmp_path, snap):
    from agent.host.seam import Host, StaticFacts, StaticGpus
    root = tmp_path / "root"
    (root / "proc/driver/nvidia").mkdir(parents=True)
    (root / "proc/driver/nvidia/version").write_text(PROPRIETARY)
    return Host(root, gpus=StaticGpus(snap), facts=StaticFacts({}))


def test_a_failed_nvml_snapshot_is_no_source_even_with_a_gpu_list(tmp_path):
    # NVML failing as a whole is nvml-responsive's finding; its list, if any, is not read.
    out = run(_snap_host(tmp_path, {"error": "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
                                    "gpus": [{"index": 0, "name": "NVIDIA B200"}]}))
    # neither PCI nor NVML judged: nothing to judge the module by (input missing)
    assert (out.status, out.skip) == (Status.SKIP, SKIP_INPUT_MISSING)


def test_a_snapshot_without_a_gpu_list_is_no_source(tmp_path):
    out = run(_snap_host(tmp_path, {"device_count": 0}))
    assert (out.status, out.skip) == (Status.SKIP, SKIP_INPUT_MISSING)
