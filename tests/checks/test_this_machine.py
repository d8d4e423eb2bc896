"""`gpu-node-agent check` as a new user runs it on this machine, and `collect` + `check
--bundle` reproducing the same verdicts.

The same tests run on a machine without an NVIDIA driver (CI) and on one with it (the GPU
machine): each branches on /proc/driver/nvidia/version and asserts what is true there,
never skips. Without a driver, the first failure is driver-loaded with its fix; with one,
driver-loaded does not say "not loaded" and driver-branch reports the version the kernel
module prints (parsed here from the file, not from the agent's output).
"""
import json
import os
import re
import subprocess
import sys

from tests.conftest import REPO

ENTRY = [sys.executable, "-m", "agent.cli"]
PROC_VERSION = "/proc/driver/nvidia/version"
# Checks whose summary carries a live reading (NVML's answer time, the clock offset, GPU
# temperatures, XIDs logged in between) that differs between two runs on a live host; their
# status must still agree.
LIVE_READINGS = {"nvml-responsive", "time-sync", "gpu-thermal", "gpu-xid"}


def _run(args, **kw):
    return subprocess.run(ENTRY + args, capture_output=True, text=True, timeout=300, cwd=REPO, **kw)


def _driver_version_here():
    """The loaded module's version from the NVRM line (NVIDIA driver README: the first
    dotted version on it), or None when no driver is loaded."""
    if not os.path.exists(PROC_VERSION):
        return None
    with open(PROC_VERSION) as f:
        line = next((ln for ln in f if ln.startswith("NVRM version:")), "")
    m = re.search(r"(?<![\w.])(\d{3,4}\.\d{1,3}(?:\.\d{1,3})?)(?![\w.])", line)
    assert m, f"{PROC_VERSION} has no driver version on its NVRM line: {line!r}"
    return m.group(1)


def test_check_on_this_machine_judges_the_driver_it_has():
    version = _driver_version_here()
    proc = _run(["check"])
    assert proc.returncode in (0, 1), proc.stderr
    assert proc.stderr == ""
    lines = proc.stdout.splitlines()
    gate = lines[-1]
    assert gate.startswith("gate dra: ")
    # exit code and gate line agree, whatever the host
    assert (proc.returncode == 0) == gate.startswith("gate dra: OPEN"), gate
    loaded = next(line for line in lines if line.split()[1:2] == ["driver-loaded"])
    if version is None:
        assert proc.returncode == 1
        first_fail = next(i for i, line in enumerate(lines) if line.lstrip().startswith("FAIL"))
        assert lines[first_fail].split()[1] == "driver-loaded"
        assert "not loaded" in lines[first_fail]
        assert lines[first_fail + 1].strip().startswith("fix: Install the NVIDIA data center driver")
        assert gate.startswith("gate dra: CLOSED (blocking: driver-loaded")
    else:
        assert "not loaded" not in loaded
        assert "kernel module loaded" in loaded
        doc = json.loads(_run(["check", "--format", "json"]).stdout)
        checks = {c["id"]: c for c in doc["checks"]}
        branch = checks["driver-branch"]
        # judged from the version file even when driver-loaded fails on missing /dev nodes
        assert branch["status"] != "skip", branch["summary"]
        assert branch["details"]["version"] == version
        assert branch["summary"].startswith(version)


def test_collect_then_check_bundle_gives_the_same_verdicts(tmp_path):
    out = tmp_path / "here.tar.gz"
    col = _run(["collect", "-o", str(out)])
    assert col.returncode == 0, col.stderr
    live = json.loads(_run(["check", "--format", "json"]).stdout)
    replay = json.loads(_run(["check", "--bundle", str(out), "--format", "json"]).stdout)
    statuses = lambda doc: {c["id"]: c["status"] for c in doc["checks"]}  # noqa: E731
    assert statuses(replay) == statuses(live)
    # Without a driver nothing reads a live value that can change between the two runs, so
    # every summary must agree; with one, the live readings are left out of the comparison.
    volatile = LIVE_READINGS if _driver_version_here() is not None else set()
    summaries = lambda doc: {c["id"]: c["summary"] for c in doc["checks"] if c["id"] not in volatile}  # noqa: E731
    assert summaries(replay) == summaries(live)
    assert replay["gate"] == live["gate"]
