"""checks/containerd/installed.py: which containerd answers `--version` (the distribution's, then
the k8s snap's), dpkg's record as the fallback, and when `containerd config dump` counts.

By hand from the sources the module cites: `containerd --version` prints
"containerd <package> <version> <commit>" (Debian: "1.6.20~ds1"; containerd.io: "1.7.27";
2.x: "v2.1.4"); dpkg's Status third word says installed (checks/dpkg.py); `config dump`
exits 1 on a config containerd rejects, and a shell reports a binary it cannot run as 126 and
one it cannot find as 127.
"""
from typing import Optional

import pytest

from agent.host.seam import Host
from agent.hostview import CommandResult
from checks.containerd.installed import (
    Dump,
    Installed,
    config_dump,
    dump_argv,
    installed_containerd,
)
from tests.checks.answers_support import Answers

SNAP = "/snap/k8s/current/bin/containerd"
CFG = "/etc/containerd/config.toml"


def host(tmp_path, answers=None, dpkg: Optional[str] = None) -> Host:
    if dpkg is not None:
        (tmp_path / "var/lib/dpkg").mkdir(parents=True)
        (tmp_path / "var/lib/dpkg/status").write_text(dpkg)
    return Host(tmp_path, commands=Answers(answers or {}))


def res(argv, rc=0, stdout="", stderr="", **kw) -> CommandResult:
    return CommandResult(tuple(argv), rc, stdout, stderr, **kw)


def stanza(name: str, version: str, status: str = "install ok installed") -> str:
    return f"Package: {name}\nStatus: {status}\nVersion: {version}\n\n"


def test_dump_argv_is_containerds_own_command_line():
    assert dump_argv("containerd", CFG) == ("containerd", "--config", CFG, "config", "dump")


@pytest.mark.parametrize("answers, expected", [
    ({("containerd", "--version"): "containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1\n"},
     Installed((1, 6, 20), "containerd --version", "containerd")),
    # the distribution's containerd does not answer: the snap's does
    ({(SNAP, "--version"): "containerd github.com/containerd/containerd/v2 v2.1.4 abc\n"},
     Installed((2, 1, 4), f"{SNAP} --version", SNAP)),
    # an answer without a version is no answer: the next binary is asked
    ({("containerd", "--version"): "containerd (devel)\n",
      (SNAP, "--version"): "containerd containerd.io 1.7.27 05044ec\n"},
     Installed((1, 7, 27), f"{SNAP} --version", SNAP)),
])
def test_the_first_binary_that_names_a_version_wins(tmp_path, answers, expected):
    h = host(tmp_path, {k: res(k, 0, v) for k, v in answers.items()},
             dpkg=stanza("containerd", "9.9.9-1"))
    assert installed_containerd(h) == expected


def test_a_failed_version_run_is_not_read(tmp_path):
    argv = ("containerd", "--version")
    h = host(tmp_path, {argv: res(argv, 1, "containerd containerd.io 1.7.27 x\n")})
    assert installed_containerd(h) == Installed(None, "", None)


@pytest.mark.parametrize("status, expected", [
    # the first installed package with a version wins, either package name
    (stanza("containerd", "1.6.20~ds1-1+deb12u1", "deinstall ok config-files")
     + stanza("containerd.io", "1.7.27-1"), (1, 7, 27)),
    (stanza("containerd", "garbage") + stanza("containerd.io", "2.0.5-1"), (2, 0, 5)),
    (stanza("containerd", "1.6.20~ds1-1") + stanza("containerd.io", "1.7.27-1"), (1, 6, 20)),
])
def test_dpkg_is_the_fallback(tmp_path, status, expected):
    got = installed_containerd(host(tmp_path, dpkg=status))
    assert got == Installed(expected, "/var/lib/dpkg/status", None)


def test_nothing_says_which_containerd(tmp_path):
    assert installed_containerd(host(tmp_path)) == Installed(None, "", None)
    assert installed_containerd(host(tmp_path / "x", dpkg=stanza("containerd", "none"))) == Installed(
        None, "", None)


DUMP = ("containerd", "--config", CFG, "config", "dump")


@pytest.mark.parametrize("answer", [
    res(DUMP, -1, "", "not recorded", not_recorded=True),
    res(DUMP, 0, 'version = 2\n', "", timed_out=True),
    res(DUMP, -9, "", "killed"),
    res(DUMP, 126, "", "permission denied"),
    res(DUMP, 127, "", "not found"),
    res(DUMP, 0, "this is [not toml\n"),
])
def test_when_containerd_cannot_be_asked_there_is_no_dump(tmp_path, answer):
    assert config_dump(host(tmp_path, {DUMP: answer}), "containerd", CFG) is None


def test_no_binary_no_dump(tmp_path):
    answers = Answers({DUMP: res(DUMP, 0, "version = 2\n")})
    assert config_dump(Host(tmp_path, commands=answers), None, CFG) is None
    assert answers.calls == []


def test_a_refusal_is_authoritative(tmp_path):
    answer = res(DUMP, 1, "", "containerd: failed to load TOML: invalid\nmore\n")
    assert config_dump(host(tmp_path, {DUMP: answer}), "containerd", CFG) == Dump(
        None, f"`{' '.join(DUMP)}` exited 1: containerd: failed to load TOML: invalid")


def test_a_dump_is_parsed_and_redacted_values_read_back(tmp_path):
    argv = (SNAP, "--config", "/x.toml", "config", "dump")
    text = 'version = 2\n[plugins."io.containerd.grpc.v1.cri".registry]\n  password = REDACTED\n'
    got = config_dump(host(tmp_path, {argv: res(argv, 0, text)}), SNAP, "/x.toml")
    assert got == Dump({"version": 2, "plugins": {"io.containerd.grpc.v1.cri": {
        "registry": {"password": "REDACTED"}}}}, None)
