"""toolkit-version: where the version comes from when nvidia-ctk does not answer (`rpm -q`,
rpm's SQLite database), the GPU Operator's own nvidia-ctk, the security floor's summary, and
the deadline each command is asked with.

Expected values written by hand from rpm(8) (`rpm -q` exits 1 printing "package NAME is not
installed"), rpm's database locations (/var/lib/rpm/rpmdb.sqlite, /usr/lib/sysimage/rpm/
rpmdb.sqlite; RHEL 8's BerkeleyDB /var/lib/rpm/Packages), `nvidia-ctk --version`'s first line,
the GPU Operator's toolkit root /usr/local/nvidia/toolkit (nvidia-ctk-installer) and
checks/policy_v2.yaml's security floor (CVE-2024-0132 fixed in 1.16.2, CVE-2025-23266 fixed
in 1.17.8).
"""
import sqlite3
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest

from agent.host.seam import Host
from agent.hostview import CommandResult
from agent.model import Outcome, Status
from checks.policy import ResolvedPolicy, load_policy
from checks.toolkit_version import TOOLKIT_VERSION
from tests.checks.answers_support import Answers
from tests.fixtures.families.toolkit import write_rpmdb

CTK = ("nvidia-ctk", "--version")
RPM = ("rpm", "-q", "--qf", "%{VERSION}-%{RELEASE}\\n", "nvidia-container-toolkit")
ROOT = "/usr/local/nvidia/toolkit"
OP_CTK = (f"{ROOT}/nvidia-ctk", "--version")
PKG = "nvidia-container-toolkit"
SQLITE_A = "var/lib/rpm/rpmdb.sqlite"
SQLITE_B = "usr/lib/sysimage/rpm/rpmdb.sqlite"
RPM_QUERY = "rpm -q nvidia-container-toolkit nvidia-container-toolkit-base"


def missing(argv) -> CommandResult:
    return CommandResult(tuple(argv), 127, "", f"{argv[0]}: command not found")


def ok(argv, stdout: str) -> CommandResult:
    return CommandResult(tuple(argv), 0, stdout, "")


def policy(path: str = "device-plugin", version: int = 2,
           overrides: Optional[Dict[str, Any]] = None) -> ResolvedPolicy:
    return ResolvedPolicy(load_policy(version, overrides), path, settings={})


def check(tmp_path: Path, answers: Dict[Tuple[str, ...], CommandResult],
          pol: Optional[ResolvedPolicy] = None, host_wrapper: Any = None) -> Tuple[Outcome, List]:
    commands = Answers(answers)
    host: Any = Host(tmp_path, commands=commands)
    if host_wrapper is not None:
        host = host_wrapper(host)
    return TOOLKIT_VERSION.run(host, pol or policy()), commands.calls


def passed_from(source: str, version: str = "1.17.8") -> Outcome:
    return Outcome(Status.PASS, f"NVIDIA Container Toolkit {version} (installed)",
                   {"version": version, "source": source, "minimum": "installed"})


# -- rpm -q ---------------------------------------------------------------------------------------
def test_rpm_query_answers_when_nvidia_ctk_is_missing(tmp_path):
    out, calls = check(tmp_path, {CTK: missing(CTK), RPM: ok(RPM, "1.17.8-1\n")})
    assert out == passed_from("rpm -q")
    assert calls == [(CTK, 10), (RPM, 10)]


def test_rpm_query_with_empty_output_is_not_installed(tmp_path):
    out, _ = check(tmp_path, {CTK: missing(CTK), RPM: ok(RPM, "  \n")})
    assert out == Outcome(Status.FAIL, "NVIDIA Container Toolkit not installed (the "
                          "device-plugin path needs it installed)", {"minimum": "installed"},
                          code="toolkit-missing")


def test_rpm_query_first_line_is_read_up_to_sixty_four_characters(tmp_path):
    # The version starts at character 63: cut at 64 only "1." is left, which is no version.
    line = "x" * 62 + "1.17.8-1"
    out, _ = check(tmp_path, {CTK: missing(CTK), RPM: ok(RPM, line + "\nsecond 1.18.0\n")})
    assert out == Outcome(Status.UNKNOWN, "unrecognised toolkit version output from rpm -q", {},
                          code="toolkit-version-unreadable")


def bdb(tmp_path: Path) -> None:
    f = tmp_path / "var/lib/rpm/Packages"
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_bytes(b"\x00\x06\x15\x61" + b"\x00" * 60)


NOT_RECORDED = "cannot read the toolkit version: `nvidia-ctk --version` not recorded for this host"
BDB_UNKNOWN = Outcome(
    Status.UNKNOWN, "nvidia-ctk did not answer and /var/lib/rpm/Packages is rpm's BerkeleyDB "
    f"database (RHEL 8), which the agent does not parse: run `{RPM_QUERY}` on the host",
    {"database": "/var/lib/rpm/Packages", "command": RPM_QUERY}, code="toolkit-rpmdb-unreadable")


def test_rpm_saying_not_installed_is_believed_over_a_berkeley_db(tmp_path):
    bdb(tmp_path)
    rpm = CommandResult(RPM, 1, "package nvidia-container-toolkit is not installed\n", "")
    out, _ = check(tmp_path, {RPM: rpm})  # nvidia-ctk not recorded: a bundle
    assert out == Outcome(Status.UNKNOWN, NOT_RECORDED, {}, code="toolkit-version-unreadable")


@pytest.mark.parametrize("rpm", [
    CommandResult(RPM, 1, "", "error: cannot open Packages database in /var/lib/rpm\n"),
    CommandResult(RPM, 2, "package nvidia-container-toolkit is not installed\n", ""),
    CommandResult(RPM, -1, "", "not recorded", not_recorded=True),
])
def test_rpm_failing_otherwise_leaves_the_berkeley_db_unread(tmp_path, rpm):
    bdb(tmp_path)
    out, _ = check(tmp_path, {RPM: rpm})
    assert out == BDB_UNKNOWN


# -- rpm's SQLite database ------------------------------------------------------------------------
def test_database_in_the_second_location_is_read(tmp_path):
    write_rpmdb(tmp_path / SQLITE_B, [(PKG, "1.17.8", "1")])
    out, _ = check(tmp_path, {CTK: missing(CTK), RPM: missing(RPM)})
    assert out == passed_from("/" + SQLITE_B)


def test_an_empty_database_file_is_passed_over(tmp_path):
    (tmp_path / SQLITE_A).parent.mkdir(parents=True)
    (tmp_path / SQLITE_A).write_bytes(b"")  # a capture that recorded presence only
    write_rpmdb(tmp_path / SQLITE_B, [(PKG, "1.17.8", "1")])
    out, _ = check(tmp_path, {CTK: missing(CTK), RPM: missing(RPM)})
    assert out == passed_from("/" + SQLITE_B)


def test_a_database_larger_than_the_default_read_cap_is_read(tmp_path):
    db = tmp_path / SQLITE_A
    write_rpmdb(db, [(PKG, "1.17.8", "1")])
    conn = sqlite3.connect(str(db))
    conn.execute("CREATE TABLE padding (x BLOB)")
    conn.execute("INSERT INTO padding VALUES (zeroblob(5 * 1024 * 1024))")  # past 4 MiB
    conn.commit()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    assert db.stat().st_size > 4 * 1024 * 1024
    out, _ = check(tmp_path, {CTK: missing(CTK), RPM: missing(RPM)})
    assert out == passed_from("/" + SQLITE_A)


class NoCapHost:
    """A HostView whose read_bytes takes the path only (the protocol's signature)."""

    def __init__(self, host: Host) -> None:
        self._host = host

    def read_bytes(self, path: str) -> bytes:
        return self._host.read_bytes(path)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._host, name)


def test_a_host_view_without_a_read_cap_argument_is_read_too(tmp_path):
    write_rpmdb(tmp_path / SQLITE_A, [(PKG, "1.17.8", "1")])
    out, _ = check(tmp_path, {CTK: missing(CTK), RPM: missing(RPM)}, host_wrapper=NoCapHost)
    assert out == passed_from("/" + SQLITE_A)


def test_berkeley_db_alone_is_unknown_naming_it(tmp_path):
    bdb(tmp_path)
    out, _ = check(tmp_path, {})
    assert out == BDB_UNKNOWN


# -- the security floor ---------------------------------------------------------------------------
def test_below_the_floor_names_every_cve_and_the_version_to_reach(tmp_path):
    out, _ = check(tmp_path, {CTK: ok(CTK, "NVIDIA Container Toolkit CLI version 1.16.1\n")})
    assert out == Outcome(
        Status.FAIL, "NVIDIA Container Toolkit 1.16.1 is below the security floor: "
        "CVE-2024-0132 (fixed in 1.16.2), CVE-2025-23266 (fixed in 1.17.8); upgrade to 1.17.8 "
        "or newer", {"cves": ["CVE-2024-0132", "CVE-2025-23266"], "security_floor": "1.17.8",
                     "version": "1.16.1", "source": "nvidia-ctk --version",
                     "minimum": "installed"}, code="toolkit-vulnerable")


# -- the GPU Operator's toolkit -------------------------------------------------------------------
def operator_host(tmp_path: Path) -> None:
    f = tmp_path / ROOT.lstrip("/") / "nvidia-container-runtime"
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text("#!/bin/sh\n")


def op_policy(path: str = "operator-clusterpolicy", floor: bool = True) -> ResolvedPolicy:
    over: Dict[str, Any] = {"toolkit": {"managed_by_operator": True}}
    if not floor:
        over["toolkit"]["security_floor"] = []
    return policy(path, 2, over)


def test_operator_toolkit_version_is_read_from_its_own_nvidia_ctk(tmp_path):
    operator_host(tmp_path)
    answers = {OP_CTK: ok(OP_CTK, "NVIDIA Container Toolkit CLI version 1.18.0\n")}
    for floor in (True, False):
        out, calls = check(tmp_path, answers, op_policy(floor=floor))
        assert out == Outcome(Status.PASS, f"GPU Operator toolkit 1.18.0 in {ROOT} (installed)",
                              {"version": "1.18.0", "source": f"{ROOT}/nvidia-ctk --version",
                               "minimum": "installed"})
        assert calls == [(OP_CTK, 10)]


def test_operator_toolkit_with_unrecognised_output_is_unknown_under_a_floor(tmp_path):
    operator_host(tmp_path)
    out, _ = check(tmp_path, {OP_CTK: ok(OP_CTK, "garbage\n")}, op_policy())
    assert out == Outcome(Status.UNKNOWN, "unrecognised toolkit version output from "
                          f"{ROOT}/nvidia-ctk --version", {}, code="toolkit-version-unreadable")


@pytest.mark.parametrize("answer, why", [
    (ok(OP_CTK, "garbage\n"), "unrecognised output"),
    (CommandResult(OP_CTK, 1, "", "boom\n"), f"`{ROOT}/nvidia-ctk --version` exited 1: boom"),
])
def test_operator_toolkit_present_is_enough_without_a_minimum_or_floor(tmp_path, answer, why):
    operator_host(tmp_path)
    out, _ = check(tmp_path, {OP_CTK: answer}, op_policy(floor=False))
    assert out == Outcome(Status.PASS, f"GPU Operator toolkit installed in {ROOT} (version not "
                          f"read: {why})", {"toolkit_root": ROOT, "minimum": "installed"})


def test_operator_toolkit_unread_on_a_path_with_a_minimum_is_unknown(tmp_path):
    operator_host(tmp_path)
    out, _ = check(tmp_path, {OP_CTK: CommandResult(OP_CTK, 1, "", "boom\n")},
                   op_policy("operator-gpucluster", floor=False))
    assert out == Outcome(Status.UNKNOWN, "cannot read the toolkit version: "
                          f"`{ROOT}/nvidia-ctk --version` exited 1: boom", {},
                          code="toolkit-version-unreadable")
