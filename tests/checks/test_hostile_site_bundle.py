"""Site checks under `check --bundle`: replay only. With a config that names a site-check
directory whose file would leave a marker if run, and a bundle that holds a recorded answer
for another argv and none for this one, nothing is executed (no exec, spawn or Popen under an
audit hook), the marker never appears, and the check is `skip` (input-missing)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

SCRIPT = """
import io, json, sys
from contextlib import redirect_stdout
sys.path.insert(0, sys.argv[1])
import agent.cli
import checks.site.loader, checks.site.outcome  # imported before the hook
agent.cli.resolve_policy(__import__("agent.config").config.Config(), None, "dra")
BAD = {"os.exec", "os.posix_spawn", "os.spawn", "os.system", "subprocess.Popen", "os.fork",
       "pty.spawn"}
seen = []
sys.addaudithook(lambda event, args: seen.append([event, repr(args)[:200]])
                 if event in BAD else None)
out = io.StringIO()
with redirect_stdout(out):
    rc = agent.cli.main(["check", "--bundle", sys.argv[2], "--config", sys.argv[3],
                         "--only", "site-probe", "--format", "json"])
print(json.dumps({"rc": rc, "exec": seen, "report": out.getvalue()}))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to own the site-check files")
def test_bundle_mode_never_executes_a_site_check(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    site = tmp_path / "site.d"
    site.mkdir()
    probe = site / "probe.sh"
    probe.write_text(f"#!/bin/sh\ntouch {marker}\nexit 0\n")
    os.chmod(probe, 0o755)
    os.chmod(site, 0o755)
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"site_checks:\n  dir: {site}\n")
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "bundle.yaml").write_text(yaml.safe_dump({"format_version": 1, "hostname": "t"}))
    # A recorded answer for the bare file (not the argv the check runs): never a match.
    (bundle / "commands.yaml").write_text(yaml.safe_dump(
        [{"argv": [str(probe)], "rc": 0, "stdout": "fine\n", "stderr": ""}]))
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(REPO), str(bundle), str(cfg)],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["exec"] == []
    assert not marker.exists()
    (check,) = [c for c in json.loads(result["report"])["checks"] if c["id"] == "site-probe"]
    assert check["status"] == "skip", check
