"""Site-check discovery and the reading of an answer (docs/site-checks.md): sidecars, names,
directory permissions, the JSON status line, and `collect` recording a site check's output so
a bundle replays the same verdict."""
import os
from pathlib import Path
from typing import Dict

import pytest

from agent.hostview import CommandResult
from agent.model import Interval, Severity, Status
from checks.site.loader import load_site_checks
from checks.site.outcome import argv_for, interpret
from tests.conftest import run_cli

P = "/etc/gpu-node-agent/site-checks.d/ib.sh"


def _dir(tmp_path: Path, files: Dict[str, str], mode: int = 0o755) -> Path:
    d = tmp_path / "site.d"
    d.mkdir()
    for name, text in files.items():
        (d / name).write_text(text)
        os.chmod(d / name, 0o644 if name.endswith(".yaml") else 0o755)
    os.chmod(d, mode)
    return d


def _run(check):
    return check.run(None, None)  # a check that is never executed reads no host


def test_sidecar_sets_severity_gates_interval_and_deadline(tmp_path: Path) -> None:
    d = _dir(tmp_path, {"ib.sh": "#!/bin/sh\n", "ib.yaml":
                        "severity: warning\ngates: [dra]\ninterval: fast\ntimeout: 7\n"})
    (check,) = load_site_checks(str(d))
    assert (check.id, check.severity, check.gates, check.interval) == (
        "site-ib", Severity.WARNING, ("dra",), Interval.FAST)
    assert check.runs == (argv_for(str(d / "ib.sh"), 7),)
    assert check.runs[0][-4:] == ("-k", "2", "7", str(d / "ib.sh"))
    assert check.runs[0][:4] == ("/usr/bin/env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
                                 "LANG=C")


@pytest.mark.parametrize("sidecar, field", [
    ("severity: fatal\n", "severity"), ("timeout: 0\n", "timeout"),
    ("timeout: true\n", "timeout"), ("gates: [gpu]\n", "gates"), ("colour: red\n", "colour"),
    ("- a list\n", "(top level)"), ("severity: [\n", "(file)"),
])
def test_a_bad_sidecar_is_unknown_naming_the_file_and_field(tmp_path, sidecar, field) -> None:
    d = _dir(tmp_path, {"ib.sh": "#!/bin/sh\n", "ib.yaml": sidecar})
    (check,) = load_site_checks(str(d))
    out = _run(check)
    assert (out.status, out.code) == (Status.UNKNOWN, "site-check-sidecar")
    assert f"{d}/ib.yaml: field {field}" in out.summary
    assert check.runs == ()


def test_a_group_writable_sidecar_is_refused(tmp_path: Path) -> None:
    d = _dir(tmp_path, {"ib.sh": "#!/bin/sh\n", "ib.yaml": "severity: warning\n"})
    os.chmod(d / "ib.yaml", 0o664)
    out = _run(load_site_checks(str(d))[0])
    assert out.code == "site-check-sidecar" and "writable by group or others" in out.summary


def test_a_writable_directory_refuses_every_file(tmp_path: Path) -> None:
    d = _dir(tmp_path, {"a.sh": "#!/bin/sh\n", "b.sh": "#!/bin/sh\n"}, mode=0o777)
    checks = load_site_checks(str(d))
    assert [c.id for c in checks] == ["site-a", "site-b", "site-checks"]
    for c in checks:
        out = _run(c)
        assert (out.status, out.code) == (Status.UNKNOWN, "site-check-refused")
        assert "writable by group or others (mode drwxrwxrwx (0777))" in out.summary
        assert c.runs == ()


@pytest.mark.parametrize("mode, why", [(0o775, "writable by group or others"),
                                       (0o644, "not executable by its owner")])
def test_file_modes_that_are_refused(tmp_path: Path, mode: int, why: str) -> None:
    d = _dir(tmp_path, {"a.sh": "#!/bin/sh\n"})
    os.chmod(d / "a.sh", mode)
    out = _run(load_site_checks(str(d))[0])
    assert out.code == "site-check-refused" and why in out.summary


def test_a_symlink_is_refused(tmp_path: Path) -> None:
    d = _dir(tmp_path, {})
    os.symlink("/bin/true", d / "link")
    out = _run(load_site_checks(str(d))[0])
    assert out.code == "site-check-refused" and "not a regular file" in out.summary


def test_bad_and_duplicate_names_are_one_directory_check(tmp_path: Path) -> None:
    d = _dir(tmp_path, {"Good_Name.sh": "", "ib.sh": "", "ib.py": "", "x.yaml": "",
                        ".hidden": "", "ib.sh~": "", "README.md": ""})
    checks = load_site_checks(str(d))
    assert [c.id for c in checks] == ["site-ib", "site-checks"]
    out = _run(checks[1])
    assert out.code == "site-check-name"
    assert "Good_Name.sh (not lowercase kebab-case)" in out.summary
    assert "ib.sh (same name as ib.py)" in out.summary


def test_no_directory_configured_means_no_checks() -> None:
    assert load_site_checks(None) == []


def test_a_missing_directory_is_a_refused_directory_check(tmp_path: Path) -> None:
    (check,) = load_site_checks(str(tmp_path / "absent"))
    assert check.id == "site-checks" and _run(check).code == "site-check-refused"


def _res(rc: int, out: str = "", **kw) -> CommandResult:
    return CommandResult(("x",), rc, out, "", **kw)


@pytest.mark.parametrize("rc, out, status, code, summary", [
    (0, "", Status.PASS, None, f"{P} exited 0"),
    (1, "", Status.FAIL, "site-check-failed", f"{P} exited 1"),
    (0, '{"status": "fail", "summary": "bad"}\n', Status.FAIL, "site-check-failed", "bad"),
    (1, '{"status": "pass", "summary": "says ok"}\n', Status.FAIL, "site-check-failed",
     "says ok"),  # the worse of the exit code and the line wins
    (0, '{"summary": "just text"}\nmore\n', Status.PASS, None, "just text"),
    (2, '{"status": "pass"}\n', Status.UNKNOWN, "site-check-unknown", f"{P} exited 2"),
    (0, '{"status": "broken"}\n', Status.UNKNOWN, "site-check-bad-output", "is not pass"),
    (0, '{"status": "warn", "extra": 1}\n', Status.UNKNOWN, "site-check-bad-output",
     "unknown key(s) extra"),
    (0, '{"status": "warn", "details": {"a": [1]}}\n', Status.UNKNOWN,
     "site-check-bad-output", "details.a is not a string"),
    (0, "{not json\n", Status.UNKNOWN, "site-check-bad-output", "not valid JSON"),
    (0, '{"summary": "' + "x" * 5000 + '"}\n', Status.UNKNOWN, "site-check-bad-output",
     "longer than 4096"),
    (127, "", Status.UNKNOWN, "site-check-unknown", "not installed"),
])
def test_interpret(rc, out, status, code, summary) -> None:
    got = interpret(_res(rc, out), P, 30)
    assert (got.status, got.code) == (status, code)
    assert summary in got.summary


def test_interpret_timeout_and_not_recorded() -> None:
    assert interpret(_res(-9, timed_out=True), P, 30).code == "site-check-timeout"
    assert interpret(_res(124), P, 30).code == "site-check-timeout"
    skipped = interpret(_res(-1, not_recorded=True), P, 30)
    assert (skipped.status, skipped.skip) == (Status.SKIP, "input-missing")


def test_collect_records_the_output_and_the_bundle_replays_it(tmp_path: Path) -> None:
    d = _dir(tmp_path, {"ib.sh": "#!/bin/sh\necho 'port 1 DOWN'\nexit 1\n"})
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"site_checks:\n  dir: {d}\n")
    out = tmp_path / "bundle"
    res = run_cli(["collect", "--config", str(cfg), "-o", str(out)])
    assert res.rc == 0, res.err
    recorded = (out / "commands.yaml").read_text()
    assert "port 1 DOWN" in recorded and str(d / "ib.sh") in recorded
    # The script changes; the bundle still answers what was recorded.
    (d / "ib.sh").write_text("#!/bin/sh\necho fine\n")
    res = run_cli(["check", "--bundle", str(out), "--config", str(cfg), "--only", "site-ib"])
    assert "FAIL" in res.out and "port 1 DOWN" in res.out, res.out + res.err
    # A bundle read without --config gets the built-in config: no site checks at all.
    res = run_cli(["check", "--bundle", str(out), "--only", "site-ib"])
    assert res.rc == 2 and "unknown check id site-ib" in res.err


def test_a_relative_directory_is_a_config_error(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("site_checks:\n  dir: site.d\n")
    res = run_cli(["config", "validate", str(cfg)])
    assert res.rc == 2 and "site_checks.dir" in res.err and "absolute" in res.err
