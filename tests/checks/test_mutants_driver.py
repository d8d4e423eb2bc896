"""checks/driver/{driver_loaded,driver_branch,driver_library_match}.py, outcome by outcome:
the whole Outcome (status, summary, details,
remediation, skip kind) for each branch of driver-loaded, driver-branch and
driver-library-match, so a changed word, bound or detail key is caught.

Expected values are written by hand from the sources the module and policy_v1.yaml cite: the
NVIDIA driver README (/dev/nvidiactl and /dev/nvidiaN are char major 195), the
/proc/driver/nvidia/version formats (checks/driver/nvidia_version.py), PCI base class 03 (0300 VGA,
0302 3D controller) and the branch minimums and lifecycle dates in checks/policy_v1.yaml.
"""
import datetime
from typing import Any, Dict, List, Optional

import pytest

from agent.config import Config
from agent.host.seam import Host, StaticFacts
from agent.hostview import CommandResult
from agent.model import Outcome, Status
from checks.driver.common import nvidia_gpus_on_pci
from checks.driver.driver_branch import DRIVER_BRANCH
from checks.driver.driver_library_match import DRIVER_LIBRARY_MATCH, userspace_nvml_versions
from checks.driver.driver_loaded import DRIVER_LOADED
from checks.policy import ResolvedPolicy, load_policy
from tests.checks.answers_support import OneAnswer

VERSION_FILE = "proc/driver/nvidia/version"
TODAY = datetime.date(2026, 12, 1)


def nvrm(version: str, open_module: bool = False) -> str:
    if open_module:
        return (f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {version}  Release "
                "Build  (dvs-builder@U16-I3-B03-4-3)  Tue Oct 15 00:00:00 UTC 2024\n")
    return f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {version}  Tue Jun 23 08:38:17 UTC 2026\n"


def make_host(tmp_path, version: Optional[str] = None, facts: Optional[Dict[str, Any]] = None,
              commands: Optional[OneAnswer] = None) -> Host:
    if version is not None:
        path = tmp_path / VERSION_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(version)
    return Host(tmp_path, commands=commands or OneAnswer(), facts=StaticFacts(facts or {}))


def policy(path: str = "dra", today: datetime.date = TODAY, **driver: Any) -> ResolvedPolicy:
    overrides = {"driver": driver} if driver else None
    return ResolvedPolicy(load_policy(1, overrides), path, today=today,
                          settings=Config().model_dump())


def gpu(cls: Any = "030200", slot: str = "0000:18:00.0") -> Dict[str, Any]:
    return {"slot": slot, "vendor": "10de", "class": cls}


def node(path: str, major: Any = 195) -> Dict[str, Any]:
    return {"path": path, "major": major, "minor": 0}


NEEDS_LOADED = Outcome(Status.SKIP,
                       "needs driver-loaded (/proc/driver/nvidia/version absent: module not loaded)",
                       {}, None, "needs:driver-loaded")


# -- nvidia_gpus_on_pci ----------------------------------------------------------------
def test_gpus_on_pci_keeps_display_class_0300_and_0302_only():
    vga, three_d = gpu("030000", "a"), gpu("030200", "b")
    short = gpu("30200", "c")  # leading zero dropped by a sysfs reader: still class 0302
    as_int = gpu(30200, "d")   # the same, written as a number
    others: List[Any] = [gpu("020000", "e"), gpu("030100", "f"), gpu("0302", "g"), {"slot": "h"},
              "030200", None]
    assert nvidia_gpus_on_pci([vga, three_d, short, as_int, *others]) == [vga, three_d, short, as_int]


@pytest.mark.parametrize("pci", [None, {"class": "030200"}, "030200"])
def test_gpus_on_pci_absent_or_malformed_is_unknown(pci):
    assert nvidia_gpus_on_pci(pci) is None


def test_gpus_on_pci_empty_list_is_zero_gpus():
    assert nvidia_gpus_on_pci([]) == []


# -- driver-loaded -----------------------------------------------------------------------
def test_loaded_fails_without_the_version_file(tmp_path):
    out = DRIVER_LOADED.run(make_host(tmp_path), policy())
    assert out == Outcome(Status.FAIL,
                          "NVIDIA kernel module not loaded (/proc/driver/nvidia/version absent)",
                          code="module-not-loaded")


@pytest.mark.parametrize("pci, count", [(None, None), ([gpu(), gpu(slot="x")], 2), ([], 0)])
def test_loaded_without_device_node_facts_is_unknown(tmp_path, pci, count):
    host = make_host(tmp_path, nvrm("580.173.02"), {"pci_devices": pci})
    out = DRIVER_LOADED.run(host, policy())
    assert out == Outcome(
        Status.UNKNOWN,
        "kernel module loaded; /dev/nvidia* device nodes not captured for this host",
        {"gpus_on_pci": count},
        code="dev-nodes-unknown",
    )


def test_loaded_with_malformed_device_node_facts_is_unknown(tmp_path):
    host = make_host(tmp_path, nvrm("580.173.02"),
                     {"pci_devices": [gpu()], "dev_nodes": {"/dev/nvidiactl": 195}})
    out = DRIVER_LOADED.run(host, policy())
    assert out == Outcome(Status.UNKNOWN, "device node facts are malformed (expected a list)",
                          {"gpus_on_pci": 1}, code="dev-nodes-unknown")


def test_loaded_passes_with_control_node_and_one_node_per_gpu(tmp_path):
    nodes = [node("/dev/nvidia1"), node("/dev/nvidiactl"), node("/dev/nvidia0"),
             node("/dev/nvidia-uvm", 510),  # not /dev/nvidiaN: its own major is fine
             {"path": 7}, {"major": 195}, "/dev/nvidia2"]  # malformed entries are ignored
    host = make_host(tmp_path, nvrm("580.173.02"),
                     {"pci_devices": [gpu(), gpu(slot="b"), gpu("020000", "nic")],
                      "dev_nodes": nodes})
    out = DRIVER_LOADED.run(host, policy())
    assert out == Outcome(
        Status.PASS,
        "kernel module loaded, /dev/nvidiactl and 2 /dev/nvidiaN node(s) present",
        {"gpus_on_pci": 2,
         "device_nodes": ["/dev/nvidia-uvm", "/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl"]},
    )


def test_loaded_lists_every_problem_in_one_failure(tmp_path):
    nodes = [node("/dev/nvidia0", 0), node("/dev/nvidia1", None)]
    host = make_host(tmp_path, nvrm("580.173.02"),
                     {"pci_devices": [gpu(slot=s) for s in "abc"], "dev_nodes": nodes})
    out = DRIVER_LOADED.run(host, policy())
    assert out == Outcome(
        Status.FAIL,
        "kernel module loaded but /dev/nvidiactl missing; /dev/nvidia0, /dev/nvidia1 not char "
        "major 195; 2 /dev/nvidiaN node(s) for 3 GPU(s) on PCI",
        {"gpus_on_pci": 3, "device_nodes": ["/dev/nvidia0", "/dev/nvidia1"]},
        code="dev-nodes-missing",
    )


def test_loaded_wrong_major_alone_fails(tmp_path):
    nodes = [node("/dev/nvidiactl"), node("/dev/nvidia0", 196)]
    host = make_host(tmp_path, nvrm("580.173.02"), {"pci_devices": [gpu()], "dev_nodes": nodes})
    out = DRIVER_LOADED.run(host, policy())
    assert out == Outcome(Status.FAIL, "kernel module loaded but /dev/nvidia0 not char major 195",
                          {"gpus_on_pci": 1, "device_nodes": ["/dev/nvidia0", "/dev/nvidiactl"]},
                          code="dev-nodes-missing")


def test_loaded_without_pci_facts_wants_one_node(tmp_path):
    ctl = [node("/dev/nvidiactl")]
    none = DRIVER_LOADED.run(make_host(tmp_path, nvrm("580.173.02"), {"dev_nodes": ctl}), policy())
    assert none == Outcome(Status.FAIL,
                           "kernel module loaded but 0 /dev/nvidiaN node(s) for 1 GPU(s) on PCI",
                           {"gpus_on_pci": None, "device_nodes": ["/dev/nvidiactl"]},
                           code="dev-nodes-missing")
    one = DRIVER_LOADED.run(
        make_host(tmp_path, None, {"dev_nodes": ctl + [node("/dev/nvidia0")]}), policy())
    assert one == Outcome(Status.PASS,
                          "kernel module loaded, /dev/nvidiactl and 1 /dev/nvidiaN node(s) present",
                          {"gpus_on_pci": None, "device_nodes": ["/dev/nvidia0", "/dev/nvidiactl"]})


def test_loaded_with_no_gpu_on_pci_needs_no_numbered_node(tmp_path):
    host = make_host(tmp_path, nvrm("580.173.02"),
                     {"pci_devices": [], "dev_nodes": [node("/dev/nvidiactl")]})
    out = DRIVER_LOADED.run(host, policy())
    assert out == Outcome(Status.PASS,
                          "kernel module loaded, /dev/nvidiactl and 0 /dev/nvidiaN node(s) present",
                          {"gpus_on_pci": 0, "device_nodes": ["/dev/nvidiactl"]})


# -- driver-branch -----------------------------------------------------------------------
def branch_details(version: str, branch: int, flavor: str, kind: Optional[str],
                   eol: Optional[str], past: bool, path: str) -> Dict[str, Any]:
    return {"version": version, "branch": branch, "flavor": flavor, "branch_kind": kind,
            "end_of_life": eol, "past_end_of_life": past, "path": path}


def test_branch_ltsb_above_the_minimum_passes(tmp_path):
    out = DRIVER_BRANCH.run(make_host(tmp_path, nvrm("580.173.02")), policy("dra"))
    assert out == Outcome(
        Status.PASS,
        "580.173.02 (proprietary module), R580 long-term support branch; meets the dra minimum R565",
        branch_details("580.173.02", 580, "proprietary", "ltsb", "2028-08-31", False, "dra"),
    )


def test_branch_at_the_minimum_passes_even_past_end_of_life_off_the_warning_paths(tmp_path):
    # R565 is listed as ended without a date; dra does not warn on age.
    out = DRIVER_BRANCH.run(make_host(tmp_path, nvrm("565.57.01", open_module=True)), policy("dra"))
    assert out == Outcome(
        Status.PASS,
        "565.57.01 (open module), R565 new feature branch; meets the dra minimum R565",
        branch_details("565.57.01", 565, "open", "feature", None, True, "dra"),
    )


def test_branch_below_the_minimum_fails_with_the_minimum(tmp_path):
    out = DRIVER_BRANCH.run(make_host(tmp_path, nvrm("560.35.03")), policy("dra"))
    assert out == Outcome(
        Status.FAIL,
        "560.35.03 (proprietary module), R560 new feature branch: below the dra minimum R565",
        {"minimum_branch": 565,
         **branch_details("560.35.03", 560, "proprietary", "feature", None, True, "dra")},
        "Install driver branch R565 or newer (an LTSB such as R580 for production), reboot, "
        "then re-run the check.",
        code="branch-below-minimum",
    )


# The warning leaves the fix to the declared failure (the engine puts it in the result).
EOL_FIX = ("Plan an upgrade to a supported branch (R580 LTSB); an ended branch gets no security "
           "fixes.")


def test_branch_past_its_dated_end_of_life_warns_on_device_plugin(tmp_path):
    host = make_host(tmp_path, nvrm("570.195.03"))
    out = DRIVER_BRANCH.run(host, policy("device-plugin", datetime.date(2026, 3, 1)))
    assert out == Outcome(
        Status.WARN,
        "570.195.03 (proprietary module), R570 production branch: past NVIDIA's end of life "
        "(2026-02-28)",
        branch_details("570.195.03", 570, "proprietary", "production", "2026-02-28", True,
                       "device-plugin"),
        code="branch-past-end-of-life",
    )
    assert DRIVER_BRANCH.failure("branch-past-end-of-life").fix == EOL_FIX


def test_branch_on_its_end_of_life_day_still_passes(tmp_path):
    host = make_host(tmp_path, nvrm("570.195.03"))
    out = DRIVER_BRANCH.run(host, policy("device-plugin", datetime.date(2026, 2, 28)))
    assert out == Outcome(
        Status.PASS,
        "570.195.03 (proprietary module), R570 production branch; meets the device-plugin "
        "minimum R535",
        branch_details("570.195.03", 570, "proprietary", "production", "2026-02-28", False,
                       "device-plugin"),
    )


def test_branch_ended_without_a_date_warns_without_one(tmp_path):
    out = DRIVER_BRANCH.run(make_host(tmp_path, nvrm("550.163.01")), policy("device-plugin"))
    assert out == Outcome(
        Status.WARN,
        "550.163.01 (proprietary module), R550 production branch: past NVIDIA's end of life",
        branch_details("550.163.01", 550, "proprietary", "production", None, True,
                       "device-plugin"),
        code="branch-past-end-of-life",
    )
    assert DRIVER_BRANCH.failure("branch-past-end-of-life").fix == EOL_FIX


def test_branch_missing_from_the_lifecycle_table_passes_on_the_minimum(tmp_path):
    out = DRIVER_BRANCH.run(make_host(tmp_path, nvrm("590.44.01")), policy("operator-gpucluster"))
    assert out == Outcome(
        Status.PASS,
        "590.44.01 (proprietary module), R590 branch not in the policy's lifecycle table; "
        "meets the operator-gpucluster minimum R580",
        branch_details("590.44.01", 590, "proprietary", None, None, False, "operator-gpucluster"),
    )


def test_branch_on_a_path_without_a_minimum_says_so(tmp_path):
    out = DRIVER_BRANCH.run(make_host(tmp_path, nvrm("580.173.02")), policy("lab"))
    assert out == Outcome(
        Status.PASS,
        "580.173.02 (proprietary module), R580 long-term support branch; no minimum",
        branch_details("580.173.02", 580, "proprietary", "ltsb", "2028-08-31", False, "lab"),
    )


def test_branch_outside_the_allowed_list_fails_naming_the_list(tmp_path):
    pol = policy("dra", allowed_branches=[580, 570])
    out = DRIVER_BRANCH.run(make_host(tmp_path, nvrm("575.64.05")), pol)
    assert out == Outcome(
        Status.FAIL,
        "575.64.05 (proprietary module), R575 new feature branch: not an allowed branch "
        "(R580, R570)",
        branch_details("575.64.05", 575, "proprietary", "feature", None, True, "dra"),
        "Install one of the fleet's allowed branches (R580, R570) or change "
        "policy.driver.allowed_branches.",
        code="branch-not-allowed",
    )
    assert DRIVER_BRANCH.run(make_host(tmp_path, nvrm("570.195.03")), pol).status == Status.PASS


def test_branch_operator_managed_driver_is_not_applicable_on_operator_paths_only(tmp_path):
    host = make_host(tmp_path, nvrm("560.35.03"))
    for path in ("operator-clusterpolicy", "operator-gpucluster"):
        out = DRIVER_BRANCH.run(host, policy(path, managed_by_operator=True))
        assert out == Outcome(
            Status.SKIP, f"the GPU Operator installs the driver on the {path} path", {}, None,
            "not-applicable")
    # Not operator-managed, or not an operator path: the branch is judged.
    assert DRIVER_BRANCH.run(host, policy("operator-gpucluster")).status == Status.FAIL
    assert DRIVER_BRANCH.run(host, policy("dra", managed_by_operator=True)).status == Status.FAIL


@pytest.mark.parametrize("check", [DRIVER_BRANCH, DRIVER_LIBRARY_MATCH])
def test_no_version_file_needs_driver_loaded(tmp_path, check):
    assert check.run(make_host(tmp_path), policy()) == NEEDS_LOADED


@pytest.mark.parametrize("check, what", [(DRIVER_BRANCH, "driver version"),
                                         (DRIVER_LIBRARY_MATCH, "kernel module version")])
def test_unparsable_version_file_is_unknown(tmp_path, check, what):
    host = make_host(tmp_path, "GCC version:  gcc version 14.2.0\n")
    assert check.run(host, policy()) == Outcome(
        Status.UNKNOWN,
        f"cannot read the {what}: no 'NVRM version:' line in /proc/driver/nvidia/version",
        code="version-unreadable")
    jetson = make_host(tmp_path, nvrm("35.3.1"))
    assert check.run(jetson, policy()) == Outcome(
        Status.UNKNOWN,
        f"cannot read the {what}: version 35.3.1 is not an NVIDIA driver branch (a Jetson/L4T "
        "release?)", code="version-unreadable")


def test_unreadable_version_file_is_unknown(tmp_path):
    (tmp_path / VERSION_FILE).mkdir(parents=True)  # exists, but cannot be read as a file
    out = DRIVER_BRANCH.run(make_host(tmp_path), policy())
    assert out == Outcome(
        Status.UNKNOWN,
        "cannot read the driver version: /proc/driver/nvidia/version absent: the NVIDIA kernel "
        "module is not loaded", code="version-unreadable")


# -- driver-library-match ---------------------------------------------------------------
X86 = "/usr/lib/x86_64-linux-gnu"


def lib_link(tmp_path, lib_dir: str, target: str) -> None:
    d = tmp_path / lib_dir.lstrip("/")
    d.mkdir(parents=True, exist_ok=True)
    (d / "libnvidia-ml.so.1").symlink_to(target)


def lib_file(tmp_path, lib_dir: str, name: str) -> None:
    d = tmp_path / lib_dir.lstrip("/")
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_text("")


def smi(stdout: str = "", stderr: str = "", rc: int = 0) -> OneAnswer:
    argv = ("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader")
    return OneAnswer(CommandResult(argv, rc, stdout, stderr))


MISMATCH_REMEDIATION = (
    "The driver packages were upgraded without reloading the module: drain the node and reboot "
    "(or unload and reload the nvidia modules) so the kernel module matches the userspace "
    "libraries; pin the driver packages if the upgrade was unintended."
)


def test_userspace_versions_soname_link_first_then_the_newest_versioned_file(tmp_path):
    lib_link(tmp_path, X86, "libnvidia-ml.so.580.173.02")
    lib_file(tmp_path, X86, "libnvidia-ml.so.570.195.03")  # the link wins over other files
    lib_link(tmp_path, "/usr/lib/aarch64-linux-gnu", "libnvidia-ml.so")  # no version: glob
    lib_file(tmp_path, "/usr/lib/aarch64-linux-gnu", "libnvidia-ml.so.580.82.07")
    lib_file(tmp_path, "/usr/lib/aarch64-linux-gnu", "libnvidia-ml.so.580.65.06")
    lib_file(tmp_path, "/usr/lib64", "libnvidia-ml.so.575.64")  # two-part versions exist
    lib_file(tmp_path, "/usr/lib", "libnvidia-ml.so.580")  # not a version: ignored
    host = make_host(tmp_path)
    assert userspace_nvml_versions(host) == {
        X86: "580.173.02", "/usr/lib/aarch64-linux-gnu": "580.82.07", "/usr/lib64": "575.64"}


def test_userspace_versions_from_an_absolute_link_in_the_last_directory(tmp_path):
    lib_link(tmp_path, "/usr/lib", "/opt/nvidia/libnvidia-ml.so.580.173.02")
    assert userspace_nvml_versions(make_host(tmp_path)) == {"/usr/lib": "580.173.02"}


def test_library_match_passes_and_asks_nvidia_smi_once(tmp_path):
    lib_link(tmp_path, X86, "libnvidia-ml.so.580.173.02")
    answers = smi("580.173.02\n")
    out = DRIVER_LIBRARY_MATCH.run(make_host(tmp_path, nvrm("580.173.02"), commands=answers),
                                   policy())
    assert out == Outcome(Status.PASS, "kernel module and libnvidia-ml are both 580.173.02",
                          {"kernel_module": "580.173.02", "libnvidia_ml": {X86: "580.173.02"}})
    assert answers.calls == [
        (("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"), 10)]


def test_library_mismatch_names_each_library_and_nvidia_smi(tmp_path):
    lib_link(tmp_path, X86, "libnvidia-ml.so.580.178")
    lib_file(tmp_path, "/usr/lib64", "libnvidia-ml.so.580.173.02")  # this one matches
    answers = smi(stderr="Failed to initialize NVML: Driver/library version mismatch\n"
                         "NVML library version: 580.178\n", rc=18)
    out = DRIVER_LIBRARY_MATCH.run(make_host(tmp_path, nvrm("580.173.02"), commands=answers),
                                   policy())
    assert out == Outcome(
        Status.FAIL,
        "Driver/library version mismatch: kernel module 580.173.02, userspace libnvidia-ml "
        f"580.178 in {X86}, 580.178 in nvidia-smi",
        {"kernel_module": "580.173.02",
         "libnvidia_ml": {X86: "580.178", "/usr/lib64": "580.173.02"}},
        code="library-mismatch",
    )
    assert DRIVER_LIBRARY_MATCH.failure("library-mismatch").fix == MISMATCH_REMEDIATION


def test_library_mismatch_seen_by_nvidia_smi_alone(tmp_path):
    answers = smi("Failed to initialize NVML: Driver/library version mismatch\n"
                  "NVML library version: 580.178\n", rc=18)
    out = DRIVER_LIBRARY_MATCH.run(make_host(tmp_path, nvrm("580.173.02"), commands=answers),
                                   policy())
    assert out == Outcome(
        Status.FAIL,
        "Driver/library version mismatch: kernel module 580.173.02, userspace libnvidia-ml "
        "580.178 in nvidia-smi",
        {"kernel_module": "580.173.02", "libnvidia_ml": {}},
        code="library-mismatch",
    )
    assert DRIVER_LIBRARY_MATCH.failure("library-mismatch").fix == MISMATCH_REMEDIATION


def test_library_version_reported_by_nvidia_smi_alone_that_matches_passes(tmp_path):
    answers = smi("NVML library version: 580.173.02\n")
    out = DRIVER_LIBRARY_MATCH.run(make_host(tmp_path, nvrm("580.173.02"), commands=answers),
                                   policy())
    assert out == Outcome(Status.PASS, "kernel module and libnvidia-ml are both 580.173.02",
                          {"kernel_module": "580.173.02", "libnvidia_ml": {}})


def test_library_not_found_anywhere_is_input_missing(tmp_path):
    out = DRIVER_LIBRARY_MATCH.run(make_host(tmp_path, nvrm("580.173.02")), policy())
    assert out == Outcome(
        Status.SKIP,
        "libnvidia-ml not found (in /usr/lib/x86_64-linux-gnu, /usr/lib/aarch64-linux-gnu, "
        "/usr/lib64, /usr/lib); nothing to compare",
        {"kernel_module": "580.173.02", "libnvidia_ml": {}}, None, "input-missing",
    )
