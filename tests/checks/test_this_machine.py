"""`gpu-node-agent check` as a new user runs it on this machine (no GPU, no driver), and
`collect` + `check --bundle` reproducing the same verdicts."""
import json
import os
import subprocess
import sys

from tests.conftest import REPO

ENTRY = [sys.executable, "-m", "agent.cli"]


def _run(args, **kw):
    return subprocess.run(ENTRY + args, capture_output=True, text=True, timeout=300, cwd=REPO, **kw)


def _no_driver_here():
    return not os.path.exists("/proc/driver/nvidia/version")


def test_check_on_this_machine_fails_first_on_driver_loaded_with_its_fix():
    assert _no_driver_here(), "this test describes a machine without an NVIDIA driver"
    proc = _run(["check"])
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    first_fail = next(i for i, line in enumerate(lines) if line.lstrip().startswith("FAIL"))
    assert lines[first_fail].split()[1] == "driver-loaded"
    assert "not loaded" in lines[first_fail]
    assert lines[first_fail + 1].strip().startswith("fix: Install the NVIDIA data center driver")
    assert lines[-1].startswith("gate dra: CLOSED (blocking: driver-loaded")
    assert proc.stderr == ""


def test_collect_then_check_bundle_gives_the_same_verdicts(tmp_path):
    out = tmp_path / "here.tar.gz"
    col = _run(["collect", "-o", str(out)])
    assert col.returncode == 0, col.stderr
    live = json.loads(_run(["check", "--format", "json"]).stdout)
    replay = json.loads(_run(["check", "--bundle", str(out), "--format", "json"]).stdout)
    verdicts = lambda doc: {c["id"]: (c["status"], c["summary"]) for c in doc["checks"]}  # noqa: E731
    assert verdicts(replay) == verdicts(live)
    assert replay["gate"] == live["gate"]
