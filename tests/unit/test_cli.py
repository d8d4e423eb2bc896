"""The command line: exit codes, one-line errors, the JSON contract, text layout."""
import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from tests.conftest import REPO, bundle, run_cli

SCHEMA = json.loads((REPO / "docs/report.schema.json").read_text())


def test_json_output_validates_against_the_documented_schema():
    for name in ("host-foundation-only", "host-no-driver", "host-jetson"):
        res = run_cli(["check", "--bundle", bundle(name), "--format", "json"])
        jsonschema.validate(res.json(), SCHEMA)


def test_schema_rejects_a_renamed_field():
    doc = run_cli(["check", "--bundle", bundle("host-foundation-only"), "--format", "json"]).json()
    doc["checks"][0]["state"] = doc["checks"][0].pop("status")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, SCHEMA)


def test_text_shows_the_fix_under_a_failure_and_the_gate_last():
    res = run_cli(["check", "--bundle", bundle("host-no-driver"), "--only", "driver-loaded"])
    lines = res.out.splitlines()
    fail = next(i for i, line in enumerate(lines) if "FAIL" in line and "driver-loaded" in line)
    assert lines[fail + 1].strip().startswith("fix: Install the NVIDIA data center driver")
    assert lines[-1] == "gate dra: CLOSED (blocking: driver-loaded)"
    assert "\033[" not in res.out  # not a TTY: no colour


@pytest.mark.parametrize(
    "args, needle",
    [
        (["check", "--only", "no-such-check"], "--only: unknown check id no-such-check"),
        (["check", "--skip", "nope"], "--skip: unknown check id nope"),
        (["check", "--path", "kubevirt"], "invalid choice: 'kubevirt'"),
        (["check", "--bundle", "/nonexistent/bundle"], "no such bundle"),
        (["explain", "nope"], "unknown check id nope"),
        (["frobnicate"], "invalid choice"),
        ([], "a command is required"),
    ],
)
def test_usage_errors_exit_2_with_one_line(args, needle):
    res = run_cli(args)
    assert res.rc == 2
    assert res.err.count("\n") == 1 and needle in res.err
    assert "Traceback" not in res.err


@pytest.mark.parametrize(
    "text, needle",
    [
        ("allocation_path: kubevirt\n", "field 'allocation_path'"),
        ("expected_gpus: -1\n", "field 'expected_gpus'"),
        ("alocation_path: dra\n", "field 'alocation_path': Extra inputs are not permitted"),
        ("policy:\n  driver:\n    minimum_branch: {dra: lots}\n", "policy field 'driver.minimum_branch.dra'"),
        ("policy_version: 7\n", "policy_version 7 is not known"),
        ("allocation_path: [dra\n", "line 2:"),  # the parser's words differ (libyaml vs Python)
        ("- just a list\n", "expected a mapping"),
        ("skip: [no-such-check]\n", "skip: unknown check id no-such-check"),
    ],
)
def test_malformed_config_is_one_line_naming_file_and_field(tmp_path, text, needle):
    cfg = tmp_path / "config.yaml"
    cfg.write_text(text)
    res = run_cli(["check", "--config", str(cfg), "--bundle", bundle("host-foundation-only")])
    assert res.rc == 2, res.out
    assert str(cfg) in res.err and needle in res.err
    assert res.err.count("\n") == 1 and "Traceback" not in res.err
    assert res.out == ""
    assert run_cli(["config", "validate", str(cfg)]).rc == 2


def test_config_validate_and_show(tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("allocation_path: device-plugin\nexpected_gpus: 8\n")
    ok = run_cli(["config", "validate", str(cfg)])
    assert ok.rc == 0 and "valid" in ok.out
    show = run_cli(["config", "show", "--config", str(cfg)])
    assert "allocation_path: device-plugin" in show.out and "expected_gpus: 8" in show.out
    assert "handler: nvidia" in show.out  # defaults are filled in
    assert run_cli(["config", "validate", str(tmp_path / "absent.yaml")]).rc == 2


def test_config_path_is_used_and_cli_path_overrides_it(tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("allocation_path: operator-gpucluster\n")
    res = run_cli(["check", "--config", str(cfg), "--bundle", bundle("host-driver-565-open"),
                   "--only", "driver-branch", "--format", "json"])
    assert res.json()["path"] == "operator-gpucluster" and res.rc == 1
    over = run_cli(["check", "--config", str(cfg), "--path", "dra", "--bundle",
                    bundle("host-driver-565-open"), "--only", "driver-branch", "--format", "json"])
    assert over.json()["path"] == "dra" and over.rc == 0


def test_internal_error_is_one_line_exit_3_and_traceback_only_with_debug(monkeypatch):
    import agent.cli

    def broken(args):
        raise RuntimeError("kaboom")

    monkeypatch.setattr(agent.cli, "cmd_version", broken)
    res = run_cli(["version"])
    assert res.rc == 3 and res.err == "gpu-node-agent: internal error: RuntimeError: kaboom\n"
    with pytest.raises(RuntimeError):
        run_cli(["--debug", "version"])


def test_explain_and_version():
    res = run_cli(["explain", "driver-branch"])
    assert res.rc == 0 and "file     /proc/driver/nvidia/version" in res.out
    ver = subprocess.run([sys.executable, "-m", "agent.cli", "version"], capture_output=True, text=True, cwd=REPO)
    assert ver.returncode == 0 and ver.stdout.startswith("gpu-node-agent ")


def test_policy_override_from_config_changes_the_verdict(tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("policy:\n  driver:\n    allowed_branches: [535]\n")
    res = run_cli(["check", "--config", str(cfg), "--bundle", bundle("host-foundation-only"),
                   "--only", "driver-branch", "--format", "json"])
    by_id = {c["id"]: c for c in res.json()["checks"]}
    assert by_id["driver-branch"]["status"] == "fail" and "not an allowed branch" in by_id["driver-branch"]["summary"]


def test_host_root_reads_files_and_never_runs_commands(tmp_path):
    src = Path(bundle("host-foundation-only")) / "root"
    res = run_cli(["check", "--host-root", str(src), "--only", "os-supported,driver-loaded,kubelet-version",
                   "--format", "json"])
    by_id = {c["id"]: c for c in res.json()["checks"]}
    assert by_id["os-supported"]["status"] == "pass"
    # /dev is not in the tree: the module is loaded, the device nodes are unknown, not assumed
    assert by_id["driver-loaded"]["status"] == "unknown"
    assert by_id["kubelet-version"]["status"] == "unknown"
    assert "not run under --host-root" in by_id["kubelet-version"]["summary"] or "not recorded" in by_id["kubelet-version"]["summary"]


@pytest.mark.parametrize("command, raises, collecting_during", [
    ("check", False, False),  # the one-shot check runs without the cyclic collector
    ("check", True, False),  # ... and the collector is back even when the command raises
    ("version", False, True),  # every other command keeps it
    ("run", False, True),  # the daemon above all: it runs for months
])
def test_the_collector_pauses_for_check_only_and_comes_back(monkeypatch, command, raises,
                                                            collecting_during):
    import gc

    import agent.cli

    seen = []

    def command_body(args):
        seen.append(gc.isenabled())
        if raises:
            raise RuntimeError("kaboom")
        return 0

    monkeypatch.setattr(agent.cli, f"cmd_{command}", command_body)
    assert gc.isenabled()
    res = run_cli([command])
    assert seen == [collecting_during]
    assert res.rc == (3 if raises else 0)
    assert gc.isenabled()


def test_a_caller_that_paused_the_collector_keeps_it_paused(monkeypatch):
    import gc

    import agent.cli

    monkeypatch.setattr(agent.cli, "cmd_check", lambda args: 0)
    gc.disable()
    try:
        assert run_cli(["check"]).rc == 0
        assert not gc.isenabled()
    finally:
        gc.enable()
