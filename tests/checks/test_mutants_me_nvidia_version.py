"""parse_proc_version (checks/driver/nvidia_version.py): an NVRM line without a version-like
token is Unparsable, and its reason quotes the line (stripped) cut to 80 characters, so a
bundle's file cannot fill a summary. Expected values by hand."""
from checks.driver.nvidia_version import DriverVersion, Unparsable, parse_proc_version


def test_an_nvrm_line_without_a_version_is_quoted_cut_to_80_characters():
    rest = "NVIDIA UNIX x86_64 Kernel Module " + "x" * 100
    got = parse_proc_version(f"NVRM version:  {rest}  \n")
    assert got == Unparsable(f"no driver version on the NVRM line: {rest[:80]!r}")
    assert len(rest[:80]) == 80


def test_a_short_line_is_quoted_whole():
    got = parse_proc_version("NVRM version: NVIDIA UNIX Kernel Module\n")
    assert got == Unparsable("no driver version on the NVRM line: 'NVIDIA UNIX Kernel Module'")


def test_the_proprietary_line_parses_whole():
    # the proprietary flavour's NVRM line (tests/fixtures/PROVENANCE.md)
    got = parse_proc_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.173.02  "
                             "Tue Jun 23 08:38:17 UTC 2026\n")
    assert got == DriverVersion("580.173.02", 580, (580, 173, 2), "proprietary", "x86_64")


def test_the_open_line_on_arm_parses_whole():
    got = parse_proc_version("NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  "
                             "565.57.01  Release Build  (dvs-builder@U16-A24-9-2)\n")
    assert got == DriverVersion("565.57.01", 565, (565, 57, 1), "open", "aarch64")


def test_a_line_naming_no_known_architecture_has_none():
    got = parse_proc_version("NVRM version: NVIDIA UNIX Kernel Module  535.288  Mon Jan 1\n")
    assert got == DriverVersion("535.288", 535, (535, 288), "proprietary", None)


def test_branch_100_is_the_first_driver_branch():
    # NVIDIA's 100.14.19 (2007) is a three-digit branch; two digits are an L4T release.
    got = parse_proc_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  100.14.19\n")
    assert isinstance(got, DriverVersion) and got.branch == 100
    l4t = parse_proc_version("NVRM version: NVIDIA UNIX Kernel Module  99.3.1\n")
    assert l4t == Unparsable("version 99.3.1 is not an NVIDIA driver branch (a Jetson/L4T "
                             "release?)")
