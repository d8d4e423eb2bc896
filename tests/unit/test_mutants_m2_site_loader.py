"""Site-check discovery (checks/site/loader.py) held to docs/site-checks.md field by field:
the sidecar's defaults and messages, the refusal details, the name and count limits, the
deadline the engine gives a check, and the re-vetting before each run on a live host. Written
for the mutants the mutation tier left alive (tests/mutation/tier.py); every expected value is
the documented one, typed here by hand."""
import errno
import os
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

from agent.hostview import CommandResult
from agent.model import PATHS, Interval, Severity, Status
from checks.site import loader
from checks.site.loader import load_site_checks, permission_problem
from checks.site.outcome import FAILURES
from tests.unit.test_site_checks_loader import _dir as site_dir

# docs/site-checks.md, "The sidecar": the remediation when the sidecar sets none.
DOC_REMEDIATION = "See docs/site-checks.md."
# The engine's deadline: the file's own, plus twice the runner's 5 s grace (checks/site/
# outcome.py RUNNER_GRACE_S), so the runner's answer is the one the engine sees.
GRACE_S = 5.0


def _dir(tmp_path: Path, files: Dict[str, str], mode: int = 0o755) -> Path:
    if os.geteuid() != 0:
        pytest.fail("these tests create root-owned files: run them as root (the CI does)")
    return site_dir(tmp_path, files, mode)


def _out(check):
    return check.run(None, None)  # a refused check reads no host


def _only(d: Path):
    (check,) = load_site_checks(str(d))
    return check


# --- what a check is made of, with and without a sidecar -----------------------------------

def test_without_a_sidecar_every_documented_default(tmp_path: Path) -> None:
    d = _dir(tmp_path, {"ib-ports.sh": "#!/bin/sh\n"})
    check = _only(d)
    path = str(d / "ib-ports.sh")
    assert check.id == "site-ib-ports"
    assert check.title == "site check ib-ports"
    assert check.remediation == DOC_REMEDIATION
    assert check.severity == Severity.CRITICAL
    assert check.gates == PATHS and check.interval == Interval.SLOW
    assert check.description == f"The site's own check {path} (docs/site-checks.md)."
    assert check.failures == FAILURES
    assert check.timeout_s == 30 + 2 * GRACE_S


def test_the_sidecar_sets_title_and_remediation_stripped(tmp_path: Path) -> None:
    d = _dir(tmp_path, {"ib.sh": "#!/bin/sh\n", "ib.yaml":
                        "title: '  InfiniBand ports  '\nremediation: ' reseat the cable '\n"
                        "timeout: 7\n"})
    check = _only(d)
    assert check.title == "InfiniBand ports"
    assert check.remediation == "reseat the cable"
    assert check.timeout_s == 7 + 2 * GRACE_S


def test_a_refused_check_keeps_its_metadata(tmp_path: Path) -> None:
    d = _dir(tmp_path, {"ib.sh": "#!/bin/sh\n"})
    os.chmod(d / "ib.sh", 0o775)
    check = _only(d)
    assert check.failures == FAILURES and check.title == "site check ib"
    assert check.runs == ()


@pytest.mark.parametrize("value, ok", [
    ("x" * 200, True), ("x" * 201, False), ("'   '", False), ("5", False), ("''", False),
])
def test_title_length_and_kind(tmp_path: Path, value: str, ok: bool) -> None:
    d = _dir(tmp_path, {"ib.sh": "#!/bin/sh\n", "ib.yaml": f"title: {value}\n"})
    check = _only(d)
    if ok:
        assert check.title == value and check.runs != ()
    else:
        out = _out(check)
        assert out.code == "site-check-sidecar"
        assert out.summary == (f"{d}/ib.yaml: field title: a non-empty string of at most 200 "
                               "characters; not run")


def test_remediation_is_held_to_the_same_rule(tmp_path: Path) -> None:
    d = _dir(tmp_path, {"ib.sh": "#!/bin/sh\n", "ib.yaml": "remediation: '  '\n"})
    out = _out(_only(d))
    assert out.summary == (f"{d}/ib.yaml: field remediation: a non-empty string of at most "
                           "200 characters; not run")


@pytest.mark.parametrize("sidecar, message", [
    # docs/site-checks.md gives this one verbatim.
    ("severity: fatal\n", "field severity: critical or warning"),
    ("interval: hourly\n", "field interval: bootstrap-only, slow or fast"),
    ("timeout: 601\n", "field timeout: whole seconds from 1 to 600"),
    ("gates: [gpu]\n", "field gates: a list of allocation paths (device-plugin, dra, "
     "operator-clusterpolicy, operator-gpucluster)"),
    ("colour: red\n", "field colour: unknown key (known: title, severity, gates, interval, "
     "timeout, remediation)"),
])
def test_sidecar_messages_name_the_allowed_values(tmp_path, sidecar, message) -> None:
    d = _dir(tmp_path, {"ib.sh": "#!/bin/sh\n", "ib.yaml": sidecar})
    out = _out(_only(d))
    assert out.summary == f"{d}/ib.yaml: {message}; not run"


def test_the_longest_timeout_is_accepted(tmp_path: Path) -> None:
    d = _dir(tmp_path, {"ib.sh": "#!/bin/sh\n", "ib.yaml": "timeout: 600\n"})
    check = _only(d)
    assert check.runs[0][-2] == "600" and check.timeout_s == 600 + 2 * GRACE_S


def test_a_sidecar_refusal_names_the_file_and_the_sidecar(tmp_path: Path) -> None:
    d = _dir(tmp_path, {"ib.sh": "#!/bin/sh\n", "ib.yaml": "severity: fatal\n"})
    out = _out(_only(d))
    assert (out.status, out.code) == (Status.UNKNOWN, "site-check-sidecar")
    assert out.details == {"path": str(d / "ib.sh"), "sidecar": str(d / "ib.yaml")}


def test_a_sidecar_past_the_config_cap_is_refused(tmp_path: Path) -> None:
    # "read with the agent's bounded YAML loader (at most 1 MiB)": 1 MiB and a bit, valid YAML.
    body = "severity: warning\n" + "#" * (1024 * 1024) + "\n"
    d = _dir(tmp_path, {"ib.sh": "#!/bin/sh\n", "ib.yaml": body})
    out = _out(_only(d))
    assert out.code == "site-check-sidecar"
    assert out.summary.startswith(f"{d}/ib.yaml: field (file): ")
    assert "larger than the 1048576-byte cap" in out.summary


def test_the_sidecar_read_itself_refuses_a_symlink(tmp_path: Path, monkeypatch) -> None:
    # The lstat vetting comes first; a sidecar swapped for a symlink after it is still not
    # followed (O_NOFOLLOW, open(2)): the read fails with ELOOP.
    real = tmp_path / "real.yaml"
    real.write_text("severity: warning\n")
    d = _dir(tmp_path, {"ib.sh": "#!/bin/sh\n"})
    os.symlink(real, d / "ib.yaml")
    monkeypatch.setattr(loader, "permission_problem", lambda *a, **k: None)
    out = _out(_only(d))
    assert out.code == "site-check-sidecar"
    assert out.summary.startswith(f"{d}/ib.yaml: field (file): ")
    assert os.strerror(errno.ELOOP) in out.summary


# --- refusals ------------------------------------------------------------------------------

def test_a_refused_file_names_path_and_problem(tmp_path: Path) -> None:
    d = _dir(tmp_path, {"ib.sh": "#!/bin/sh\n"})
    os.chmod(d / "ib.sh", 0o775)
    out = _out(_only(d))
    problem = "writable by group or others (mode -rwxrwxr-x (0775))"
    assert out.details == {"path": str(d / "ib.sh"), "problem": problem}
    assert out.summary == f"{d}/ib.sh: refused, never run: {problem}"


def test_permission_problem_words(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_text("")
    os.chmod(f, 0o644)
    assert permission_problem(str(tmp_path / "absent"), want_dir=False) == (
        f"cannot stat it ({os.strerror(errno.ENOENT)})")
    assert permission_problem(str(f), want_dir=True) == "not a directory (mode -rw-r--r-- (0644))"
    assert permission_problem(str(tmp_path), want_dir=False).startswith("not a regular file (")
    assert permission_problem(str(f), want_dir=False, executable=False) is None


def test_the_directory_check_itself(tmp_path: Path) -> None:
    d = _dir(tmp_path, {"ib.sh": "#!/bin/sh\n"}, mode=0o777)
    check = load_site_checks(str(d))[-1]
    assert check.id == "site-checks"
    assert check.title == "site-check directory"
    assert check.severity == Severity.CRITICAL
    assert check.gates == PATHS and check.interval == Interval.SLOW
    assert check.remediation == DOC_REMEDIATION
    assert check.failures == FAILURES
    assert check.description == ("The configured site-check directory itself "
                                 "(docs/site-checks.md).")
    out = _out(check)
    problem = "writable by group or others (mode drwxrwxrwx (0777))"
    assert out.details == {"path": str(d), "problem": problem}
    assert out.summary == f"{d}: refused, nothing in it is run: {problem}"


def test_an_unlistable_directory_says_why(tmp_path: Path) -> None:
    absent = tmp_path / "absent"
    (check,) = load_site_checks(str(absent))
    out = _out(check)
    assert out.summary == (f"{absent}: cannot list the site-check directory "
                           f"({os.strerror(errno.ENOENT)})")
    assert out.details == {"path": str(absent)}


# --- names and counts ----------------------------------------------------------------------

def test_a_name_of_fifty_characters_is_the_longest(tmp_path: Path) -> None:
    fifty, fifty_one = "a" * 50, "b" * 51
    d = _dir(tmp_path, {fifty + ".sh": "#!/bin/sh\n", fifty_one + ".sh": "#!/bin/sh\n"})
    checks = load_site_checks(str(d))
    assert [c.id for c in checks] == ["site-" + fifty, "site-checks"]
    out = _out(checks[1])
    assert out.summary == f"{d}: not run: {fifty_one}.sh (not lowercase kebab-case)"
    assert out.details == {"path": str(d), "files": [f"{fifty_one}.sh (not lowercase kebab-case)"]}


def test_a_name_with_a_newline_is_shown_escaped(tmp_path: Path) -> None:
    d = _dir(tmp_path, {"a\nb": "#!/bin/sh\n"})
    (check,) = load_site_checks(str(d))
    out = _out(check)
    assert out.summary == f"{d}: not run: 'a\\nb' (not lowercase kebab-case)"
    assert "\n" not in out.summary


def test_sixty_four_checks_and_no_more(tmp_path: Path) -> None:
    files = {f"c{i:02d}.sh": "#!/bin/sh\n" for i in range(66)}
    d = _dir(tmp_path, files)
    checks = load_site_checks(str(d))
    assert len(checks) == 65  # 64 site checks, then site-checks naming the 65th and 66th
    assert checks[63].id == "site-c63" and checks[64].id == "site-checks"
    out = _out(checks[64])
    assert out.code == "site-check-name"
    assert out.summary == (f"{d}: not run: c64.sh (more than 64 site checks); "
                           "c65.sh (more than 64 site checks)")


def test_the_summary_names_five_bad_files_and_the_details_all(tmp_path: Path) -> None:
    bad = [f"Bad{i}.sh" for i in range(6)]
    d = _dir(tmp_path, {**{b: "#!/bin/sh\n" for b in bad}, "ok.sh": "#!/bin/sh\n"})
    checks = load_site_checks(str(d))
    assert [c.id for c in checks] == ["site-ok", "site-checks"]
    out = _out(checks[1])
    words = [f"{b} (not lowercase kebab-case)" for b in bad]
    assert out.summary == f"{d}: not run: " + "; ".join(words[:5])
    assert out.details == {"path": str(d), "files": words}


# --- asked again before each run on a live host --------------------------------------------

class _LiveHost:
    is_live = True

    def __init__(self) -> None:
        self.ran: List[Any] = []

    def run(self, argv, timeout: Optional[float] = None) -> CommandResult:
        self.ran.append(argv)
        return CommandResult(tuple(argv), 0, "fine\n", "")


def test_a_file_made_writable_after_the_load_is_not_run(tmp_path: Path) -> None:
    d = _dir(tmp_path, {"ib.sh": "#!/bin/sh\n"})
    check = _only(d)
    host = _LiveHost()
    assert check.run(host, None).status == Status.PASS and len(host.ran) == 1
    os.chmod(d / "ib.sh", 0o775)
    out = check.run(host, None)
    assert (out.status, out.code) == (Status.UNKNOWN, "site-check-refused")
    assert out.details["problem"] == "writable by group or others (mode -rwxrwxr-x (0775))"
    assert len(host.ran) == 1  # never run


def test_a_directory_made_writable_after_the_load_refuses_the_run(tmp_path: Path) -> None:
    d = _dir(tmp_path, {"ib.sh": "#!/bin/sh\n"})
    check = _only(d)
    os.chmod(d, 0o777)
    host = _LiveHost()
    out = check.run(host, None)
    assert out.code == "site-check-refused" and host.ran == []
    assert out.details["problem"] == "writable by group or others (mode drwxrwxrwx (0777))"
