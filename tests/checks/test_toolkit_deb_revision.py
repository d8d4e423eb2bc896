"""toolkit-version on a dpkg record whose upstream version holds a hyphen (checks/
toolkit_release.py): deb-version(5) puts the debian_revision after the LAST hyphen, so
"1.18.0~rc.1-beta-1" is the candidate 1.18.0~rc.1-beta, revision 1.

Expected verdicts written by hand from checks/policy_v1.yaml (toolkit minimum 1.18.0 on dra,
none on device-plugin) and checks/policy_v2.yaml's security floor (CVE-2025-23266 fixed in
1.17.8): a candidate of 1.18.0 is below 1.18.0 and above 1.17.8, whatever its revision.
These verdicts are the ones the first-hyphen parse gave too (a bug fix, not a new gate); only
the version the summary shows gains the upstream part's "-beta".
"""
from pathlib import Path

import pytest

from agent.host.seam import Host
from agent.model import Outcome, Status
from checks.policy import ResolvedPolicy, load_policy
from checks.toolkit_version import TOOLKIT_VERSION
from tests.checks.test_mutants_time_sync import Answers

# dpkg-query(1) / dpkg's status file: a paragraph per package, Status "install ok installed".
STATUS = ("Package: nvidia-container-toolkit\nStatus: install ok installed\n"
          "Architecture: amd64\nVersion: {version}\n\n")


def run(tmp_path: Path, version: str, path: str) -> Outcome:
    status = tmp_path / "var/lib/dpkg/status"
    status.parent.mkdir(parents=True)
    status.write_text(STATUS.format(version=version))
    # nvidia-ctk not installed (no answer recorded): the dpkg record is the source.
    host = Host(tmp_path, commands=Answers({}))
    return TOOLKIT_VERSION.run(host, ResolvedPolicy(load_policy(2), path, settings={}))


@pytest.mark.parametrize("version, shown", [
    ("1.18.0~rc.1-beta-1", "1.18.0-rc.1.beta"),
    ("1.18.0~rc.1-1", "1.18.0-rc.1"),
])
def test_a_candidate_of_the_minimum_is_below_it_on_dra(tmp_path, version, shown):
    got = run(tmp_path, version, "dra")
    assert got == Outcome(
        Status.FAIL, f"NVIDIA Container Toolkit {shown} is below 1.18.0 required on the dra path",
        {"version": shown, "source": "/var/lib/dpkg/status", "minimum": ">= 1.18.0"},
        code="toolkit-too-old")


@pytest.mark.parametrize("version, shown", [
    ("1.18.0~rc.1-beta-1", "1.18.0-rc.1.beta"),
    ("1.17.8-1", "1.17.8"),
])
def test_above_the_floor_passes_on_device_plugin(tmp_path, version, shown):
    got = run(tmp_path, version, "device-plugin")
    assert got == Outcome(
        Status.PASS, f"NVIDIA Container Toolkit {shown} (installed)",
        {"version": shown, "source": "/var/lib/dpkg/status", "minimum": "installed"})


def test_a_hyphenated_candidate_of_the_fixed_release_is_below_the_floor(tmp_path):
    got = run(tmp_path, "1.17.8~rc.1-beta-1", "device-plugin")
    assert (got.status, got.code) == (Status.FAIL, "toolkit-vulnerable")
    assert got.summary.startswith("NVIDIA Container Toolkit 1.17.8-rc.1.beta is below the "
                                  "security floor: CVE-2025-23266 (fixed in 1.17.8)")
