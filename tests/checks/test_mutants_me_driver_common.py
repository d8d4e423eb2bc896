"""read_driver_version (checks/driver/common.py): "the loaded kernel module's version, or None
with the reason": a version comes with no reason (an empty string), and each None names why.
Module text as NVIDIA's kernel module prints /proc/driver/nvidia/version."""
from agent.host.seam import Host
from checks.driver.common import read_driver_version
from checks.driver.nvidia_version import DriverVersion

MODULE = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.15  Wed Jan  8 20:08:14 UTC 2025\n"


def _host(tmp_path, text=None) -> Host:
    if text is not None:
        (tmp_path / "proc/driver/nvidia").mkdir(parents=True)
        (tmp_path / "proc/driver/nvidia/version").write_text(text)
    return Host(tmp_path)


def test_a_version_comes_without_a_reason(tmp_path):
    assert read_driver_version(_host(tmp_path, MODULE)) == (
        DriverVersion("570.86.15", 570, (570, 86, 15), "proprietary", "x86_64"), "")


def test_no_version_file_and_an_unparsable_one_name_why(tmp_path):
    assert read_driver_version(_host(tmp_path / "a")) == (
        None, "/proc/driver/nvidia/version absent: the NVIDIA kernel module is not loaded")
    assert read_driver_version(_host(tmp_path / "b", "garbage\n")) == (
        None, "no 'NVRM version:' line in /proc/driver/nvidia/version")
