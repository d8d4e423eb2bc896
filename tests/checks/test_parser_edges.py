"""Parser edges of four checks, each a bug the mutation scoring surfaced.

Expected values are written by hand from the formats the modules cite:
- dpkg's status file: deb822 paragraphs (deb-control(5)); Status is three words, "want
  error-flag status" (dpkg-query(1); dpkg(1) "PACKAGE STATES": not-installed, config-files,
  half-installed, unpacked, half-configured, triggers-awaited, triggers-pending, installed;
  error flag ok or reinstreq). Only the third word says installed.
- libnvidia-ml's versioned file names, libnvidia-ml.so.<major>.<minor>.<patch> (NVIDIA driver
  README, "Installed Components"): 580.105.08 is a newer release than 580.95.05.
- the pci_devices host fact: a list of {"slot", "vendor", "class"} (agent/host/live.py), from
  the host, so untrusted: a wrong shape must never raise.
"""
from typing import Any, Dict, Optional

import pytest

from agent.config import Config
from agent.host.seam import Host
from agent.hostview import CommandResult
from agent.model import Outcome, Status
from checks.containerd.installed import Installed, installed_containerd
from checks.dpkg import installed_version, installed_versions, status_installed
from checks.driver.driver_library_match import DRIVER_LIBRARY_MATCH, userspace_nvml_versions
from checks.gpu.gpu_count import GPU_COUNT
from checks.policy import ResolvedPolicy, load_policy
from checks.toolkit_version import TOOLKIT_VERSION, dpkg_version
from tests.checks.answers_support import OneAnswer
from tests.checks.snapshot_support import on_snapshot

DPKG = "/var/lib/dpkg/status"


def stanza(package: str, version: str, status: str) -> str:
    return (f"Package: {package}\nStatus: {status}\nPriority: optional\nArchitecture: amd64\n"
            f"Version: {version}\nDescription: a package\n continuation: not a field\n .\n")


def write_dpkg(tmp_path, *stanzas: str) -> None:
    d = tmp_path / "var/lib/dpkg"
    d.mkdir(parents=True, exist_ok=True)
    (d / "status").write_text("\n".join(stanzas))


def pol(path: str = "dra", **settings: Any) -> ResolvedPolicy:
    return ResolvedPolicy(load_policy(1), path, settings=Config(**settings).model_dump())


# -- 1/2: dpkg Status, the shared parser (checks/dpkg.py) ---------------------------------
@pytest.mark.parametrize("status, installed", [
    ("install ok installed", True),
    ("hold ok installed", True),          # held: still installed
    ("deinstall ok installed", True),     # selected for removal, not yet removed
    ("install ok triggers-pending", True),   # configured; a trigger has yet to run
    ("install ok triggers-awaited", True),   # configured; awaits another package's trigger
    ("install ok half-installed", False),
    ("install ok unpacked", False),
    ("install ok half-configured", False),
    ("deinstall ok config-files", False),
    ("purge ok not-installed", False),
    ("unknown ok not-installed", False),
    ("install reinstreq half-installed", False),
    ("install reinstreq installed", False),  # dpkg(1): broken, requires reinstallation
    ("installed", False),                    # not three words
    ("install ok installed extra", False),
    ("", False),
])
def test_status_third_word_decides(status, installed):
    assert status_installed(status) is installed


def test_installed_versions_in_file_order_skipping_the_not_installed():
    text = "\n".join([
        stanza("containerd", "1.6.20~ds1-1", "purge ok not-installed"),
        stanza("containerd.io", "1.7.27-1", "install ok installed"),
        stanza("containerd", "1.6.24-1", "install ok triggers-pending"),
        stanza("runc", "1.1.12-1", "install ok installed"),
    ])
    assert list(installed_versions(text, ("containerd", "containerd.io"))) == [
        ("containerd.io", "1.7.27-1"), ("containerd", "1.6.24-1")]
    assert installed_version(text, "containerd") == "1.6.24-1"
    assert installed_version(text, "runc") == "1.1.12-1"
    assert installed_version(text, "docker.io") is None


# -- 1: toolkit-version ------------------------------------------------------------------
@pytest.mark.parametrize("status", [
    "install ok half-installed", "purge ok not-installed", "install ok unpacked",
    "install reinstreq half-installed",
])
def test_toolkit_dpkg_version_needs_status_installed(status):
    text = stanza("nvidia-container-toolkit", "1.18.0-1", status)
    assert dpkg_version(text, "nvidia-container-toolkit") is None


def test_toolkit_dpkg_version_of_a_triggers_pending_package():
    text = stanza("nvidia-container-toolkit", "1.18.0-1", "install ok triggers-pending")
    assert dpkg_version(text, "nvidia-container-toolkit") == "1.18.0-1"


def test_half_installed_toolkit_fails_as_missing(tmp_path):
    write_dpkg(tmp_path, stanza("nvidia-container-toolkit", "1.18.0-1",
                                "install ok half-installed"))
    host = Host(tmp_path, commands=OneAnswer(
        CommandResult(("nvidia-ctk", "--version"), 127, "", "nvidia-ctk: not found")))
    out = TOOLKIT_VERSION.run(host, pol("dra"))
    assert out == Outcome(
        Status.FAIL, "NVIDIA Container Toolkit not installed (the dra path needs it >= 1.18.0)",
        {"minimum": ">= 1.18.0"}, code="toolkit-missing")


# -- 2: containerd's dpkg fallback ---------------------------------------------------------
def test_containerd_config_files_only_is_not_installed(tmp_path):
    write_dpkg(tmp_path, stanza("containerd.io", "1.7.27-1", "deinstall ok config-files"),
               stanza("containerd", "1.6.20~ds1-1", "install ok half-installed"))
    assert installed_containerd(Host(tmp_path, commands=OneAnswer())) == Installed(None, "", None)


def test_containerd_installed_after_a_not_installed_record(tmp_path):
    write_dpkg(tmp_path, stanza("containerd", "1.6.20~ds1-1", "purge ok not-installed"),
               stanza("containerd.io", "1.7.27-1", "install ok installed"))
    assert installed_containerd(Host(tmp_path, commands=OneAnswer())) == Installed(
        (1, 7, 27), DPKG, None)


# -- 3: driver-library-match picks the newest library by number ------------------------------
X86 = "/usr/lib/x86_64-linux-gnu"


def lib_files(tmp_path, *names: str) -> None:
    d = tmp_path / X86.lstrip("/")
    d.mkdir(parents=True, exist_ok=True)
    for name in names:
        (d / name).write_text("")


def test_newest_library_by_version_not_by_string(tmp_path):
    # String order puts "580.95.05" after "580.105.08" ('9' > '1'); 105 > 95.
    lib_files(tmp_path, "libnvidia-ml.so.580.95.05", "libnvidia-ml.so.580.105.08",
              "libnvidia-ml.so.575.64")
    assert userspace_nvml_versions(Host(tmp_path, commands=OneAnswer())) == {X86: "580.105.08"}


def test_library_match_passes_with_an_older_leftover_library(tmp_path):
    lib_files(tmp_path, "libnvidia-ml.so.580.95.05", "libnvidia-ml.so.580.105.08")
    version = tmp_path / "proc/driver/nvidia/version"
    version.parent.mkdir(parents=True)
    version.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.105.08  "
                       "Tue Jun 23 08:38:17 UTC 2026\n")
    answers = OneAnswer(CommandResult(
        ("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"), 0,
        "580.105.08\n", ""))
    out = DRIVER_LIBRARY_MATCH.run(Host(tmp_path, commands=answers), pol())
    assert out == Outcome(Status.PASS, "kernel module and libnvidia-ml are both 580.105.08",
                          {"kernel_module": "580.105.08", "libnvidia_ml": {X86: "580.105.08"}})


# -- 4: gpu-count on a malformed pci_devices fact --------------------------------------------
NV = [{"index": 0, "pci_bus_id": "00000000:1A:00.0"}, {"index": 1, "pci_bus_id": "00000000:2B:00.0"}]
GPU0 = {"slot": "0000:1a:00.0", "vendor": "10de", "class": "030200"}


def count(pci_devices: Any, **settings: Any) -> Outcome:
    return on_snapshot(GPU_COUNT, {"gpus": NV, "device_count": 2}, {"pci_devices": pci_devices},
                       **settings)


def details(expected: Optional[int], why: Optional[str]) -> Dict[str, Any]:
    out: Dict[str, Any] = {"nvml": 2, "usable": 2, "pci": None, "expected": expected,
                           "lost": []}
    if why is not None:
        out["pci_malformed"] = why
    return out


@pytest.mark.parametrize("entry, what", [
    ({"vendor": "10de", "class": "030200"}, "missing"),
    ({"slot": None, "vendor": "10de", "class": "030200"}, "null"),
    ({"slot": 7, "vendor": "10de", "class": "030200"}, "an integer"),
    ({"slot": "", "vendor": "10de", "class": "030200"}, "empty"),
])
def test_gpu_entry_without_a_slot_is_a_malformed_inventory_not_an_exception(entry, what):
    why = f"pci_devices: an NVIDIA GPU entry's slot is {what}"
    out = count([GPU0, entry])
    assert out == Outcome(
        Status.WARN,
        f"NVML sees 2 GPU(s); PCI inventory malformed ({why}) to cross-check (set "
        "expected_gpus to pin the count)", details(None, why), code="pci-unavailable")
    # With the count pinned, the config's number is the cross-check.
    out = count([GPU0, entry], expected_gpus=2)
    assert out == Outcome(Status.PASS, "NVML sees 2 GPU(s), as expected (2)", details(2, why))


def test_entries_of_the_wrong_shape_are_skipped():
    # Not a dict, or not a GPU (a NIC without a slot): not counted, nothing raises.
    gpu1 = {"slot": "0000:2b:00.0", "vendor": "10de", "class": "030200"}
    out = count([GPU0, "0000:05:00.0", None, 3, {"class": "020000"}, gpu1])
    assert out == Outcome(Status.PASS, "2 GPU(s) on PCI and in NVML",
                          {"nvml": 2, "usable": 2, "pci": 2, "expected": None, "lost": []})
