"""checks/toolkit_version.py, outcome by outcome: where the installed NVIDIA Container Toolkit
version
comes from (`nvidia-ctk --version`, else the dpkg status file), and the whole Outcome for each
branch of toolkit-version.

Expected values are written by hand from `nvidia-ctk --version`'s first line ("NVIDIA
Container Toolkit CLI version 1.18.0"), dpkg's status file format (deb-control(5) stanzas
separated by a blank line, continuation lines start with a space) and the toolkit minimums in
checks/policy_v1.yaml (dra and operator-gpucluster 1.18.0, the others: installed).
"""
from typing import Any, Optional

import pytest

from agent.config import Config
from agent.host.seam import Host
from agent.hostview import CommandResult
from agent.model import Outcome, Status
from checks.policy import ResolvedPolicy, load_policy
from checks.toolkit_version import TOOLKIT_VERSION, dpkg_version
from tests.checks.answers_support import OneAnswer

ARGV = ("nvidia-ctk", "--version")
CTK_OUT = "NVIDIA Container Toolkit CLI version 1.18.0\ncommit: 9a3ce7c\n"


def stanza(package: str, version: str, status: str = "install ok installed") -> str:
    return (f"Package: {package}\nStatus: {status}\nArchitecture: amd64\nVersion: {version}\n"
            "Description: NVIDIA Container Toolkit: the CLI\n multi-line: description\n .\n"
            " more text\nConffiles:\n /etc/nvidia-container-runtime/config.toml 0123abcd\n")


def run(tmp_path, result: Optional[CommandResult], dpkg: Optional[str] = None,
        path: str = "dra", **toolkit: Any) -> Outcome:
    if dpkg is not None:
        (tmp_path / "var/lib/dpkg").mkdir(parents=True, exist_ok=True)
        (tmp_path / "var/lib/dpkg/status").write_text(dpkg)
    pol = load_policy(1, {"toolkit": toolkit} if toolkit else None)
    host = Host(tmp_path, commands=OneAnswer(result))
    return TOOLKIT_VERSION.run(host, ResolvedPolicy(pol, path, settings=Config().model_dump()))


def answer(stdout: str = CTK_OUT, rc: int = 0) -> CommandResult:
    return CommandResult(ARGV, rc, stdout, "")


# -- dpkg_version ------------------------------------------------------------------------
def test_dpkg_version_of_the_installed_package_only():
    text = "\n".join([
        stanza("nvidia-container-toolkit-base", "1.18.0-1"),
        stanza("nvidia-container-toolkit", "1.16.0-1", "deinstall ok config-files"),
        stanza("nvidia-container-toolkit", "1.17.8-1"),
    ])
    assert dpkg_version(text, "nvidia-container-toolkit") == "1.17.8-1"
    assert dpkg_version(text, "nvidia-container-toolkit-base") == "1.18.0-1"
    assert dpkg_version(text, "containerd") is None
    assert dpkg_version("", "nvidia-container-toolkit") is None
    # no Status field: not installed
    assert dpkg_version("Package: nvidia-container-toolkit\nVersion: 1.0.0\n",
                        "nvidia-container-toolkit") is None


def test_dpkg_version_ignores_continuation_lines():
    text = ("Package: other\nStatus: install ok installed\nDescription: x\n Package: "
            "nvidia-container-toolkit\n Version: 9.9.9\nVersion: 1.0.0\n")
    assert dpkg_version(text, "nvidia-container-toolkit") is None
    assert dpkg_version(text, "other") == "1.0.0"


# -- toolkit-version ---------------------------------------------------------------------
def test_version_from_nvidia_ctk_at_the_minimum_passes(tmp_path):
    answers = OneAnswer(answer())
    host = Host(tmp_path, commands=answers)
    out = TOOLKIT_VERSION.run(host, ResolvedPolicy(load_policy(1), "dra",
                                                   settings=Config().model_dump()))
    assert out == Outcome(Status.PASS, "NVIDIA Container Toolkit 1.18.0 (>= 1.18.0)",
                          {"version": "1.18.0", "source": "nvidia-ctk --version",
                           "minimum": ">= 1.18.0"})
    assert answers.calls == [(ARGV, 10)]


def test_version_below_the_minimum_fails(tmp_path):
    out = run(tmp_path, answer("NVIDIA Container Toolkit CLI version 1.17.8\n"),
              path="operator-gpucluster")
    assert out == Outcome(
        Status.FAIL,
        "NVIDIA Container Toolkit 1.17.8 is below 1.18.0 required on the operator-gpucluster path",
        {"version": "1.17.8", "source": "nvidia-ctk --version", "minimum": ">= 1.18.0"},
        code="toolkit-too-old")


def test_path_without_a_minimum_needs_it_installed(tmp_path):
    out = run(tmp_path, answer("NVIDIA Container Toolkit CLI version 1.14.6\n"),
              path="device-plugin")
    assert out == Outcome(Status.PASS, "NVIDIA Container Toolkit 1.14.6 (installed)",
                          {"version": "1.14.6", "source": "nvidia-ctk --version",
                           "minimum": "installed"})


def test_version_from_dpkg_when_nvidia_ctk_cannot_be_run(tmp_path):
    dpkg = stanza("nvidia-container-toolkit", "1.17.8-1")
    out = run(tmp_path, CommandResult(ARGV, 127, "", "not found"), dpkg)
    assert out == Outcome(
        Status.FAIL, "NVIDIA Container Toolkit 1.17.8 is below 1.18.0 required on the dra path",
        {"version": "1.17.8", "source": "/var/lib/dpkg/status", "minimum": ">= 1.18.0"},
        code="toolkit-too-old")
    out = run(tmp_path, None, stanza("nvidia-container-toolkit", "1.18.1-1"))
    assert out.status == Status.PASS and out.details["source"] == "/var/lib/dpkg/status"


@pytest.mark.parametrize("path, need", [("dra", ">= 1.18.0"), ("device-plugin", "installed")])
def test_not_installed_fails_saying_what_the_path_needs(tmp_path, path, need):
    dpkg = stanza("nvidia-container-toolkit", "1.16.0-1", "deinstall ok config-files")
    out = run(tmp_path, CommandResult(ARGV, 127, "", "nvidia-ctk: not found"), dpkg, path)
    assert out == Outcome(
        Status.FAIL, f"NVIDIA Container Toolkit not installed (the {path} path needs it {need})",
        {"minimum": need}, code="toolkit-missing")


def test_unanswered_command_is_unknown_with_the_reason(tmp_path):
    assert run(tmp_path, None) == Outcome(
        Status.UNKNOWN,
        "cannot read the toolkit version: `nvidia-ctk --version` not recorded for this host",
        code="toolkit-version-unreadable")
    out = run(tmp_path, CommandResult(ARGV, 1, "", "error: permission denied\n"))
    assert out == Outcome(
        Status.UNKNOWN,
        "cannot read the toolkit version: `nvidia-ctk --version` exited 1: error: permission "
        "denied", code="toolkit-version-unreadable")


def test_unrecognised_output_is_unknown_naming_the_source(tmp_path):
    assert run(tmp_path, answer("something else\n")) == Outcome(
        Status.UNKNOWN, "unrecognised toolkit version output from nvidia-ctk --version",
        code="toolkit-version-unreadable")
    dpkg = stanza("nvidia-container-toolkit", "unknown")
    assert run(tmp_path, None, dpkg) == Outcome(
        Status.UNKNOWN, "unrecognised toolkit version output from /var/lib/dpkg/status",
        code="toolkit-version-unreadable")


def test_operator_managed_toolkit_is_skipped_on_operator_paths_only(tmp_path):
    for path in ("operator-clusterpolicy", "operator-gpucluster"):
        assert run(tmp_path, None, path=path, managed_by_operator=True) == Outcome(
            Status.SKIP, f"the GPU Operator installs the toolkit on the {path} path", {}, None,
            "not-applicable")
    low = answer("NVIDIA Container Toolkit CLI version 1.17.8\n")
    assert run(tmp_path, low, path="dra", managed_by_operator=True).status == Status.FAIL
    assert run(tmp_path, low, path="operator-gpucluster").status == Status.FAIL
