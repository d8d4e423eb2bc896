"""Site checks (docs/site-checks.md) run for real on this machine: passing, warning, failing,
hanging past the deadline and refused for their permissions, seen in `check`'s JSON and text
and in the metrics exposition. The contract is node-problem-detector's custom plugin monitor
(docs/custom_plugin_monitor.md: exit 0 OK, 1 NonOK, anything else Unknown) plus the JSON line."""
import json
import os
import re
from pathlib import Path
from typing import Dict

import pytest

from tests.conftest import run_cli

WARN_LINE = ('{"status": "warn", "summary": "mlx5_1 port 1 at 100 Gb/s, expected 400", '
             '"details": {"port": "mlx5_1/1"}}')
SCRIPTS: Dict[str, str] = {
    "pass.sh": "echo 'all four ports ACTIVE'\nexit 0\n",
    "warn.sh": f"echo '{WARN_LINE}'\nexit 0\n",
    "fail.sh": "echo 'dcgmi diag -r 1: PCIe test failed on GPU 3'\nexit 1\n",
    "hang.sh": "echo started\nexec sleep 60\n",
    "refused.sh": "echo never\nexit 0\n",
    "weird.sh": "echo 'half done'\nexit 3\n",
    "env.sh": 'echo "$(env | sort | tr "\\n" " ")"\nexit 0\n',
}
IDS = ["site-pass", "site-warn", "site-fail", "site-hang", "site-refused", "site-weird",
       "site-env"]
NOT_ROOT = 4242  # any uid but 0


def _write(path: Path, text: str, mode: int = 0o755) -> None:
    path.write_text(text)
    os.chmod(path, mode)


@pytest.fixture
def site(tmp_path: Path) -> Path:
    if os.geteuid() != 0:
        pytest.fail("these tests create root-owned files: run them as root (the CI does)")
    d = tmp_path / "site.d"
    d.mkdir(mode=0o755)
    os.chmod(d, 0o755)
    for name, body in SCRIPTS.items():
        _write(d / name, "#!/bin/sh\n" + body)
    # The deadline comes from the sidecar: one second for the hanging check.
    _write(d / "hang.yaml", "timeout: 1\nseverity: warning\n", 0o644)
    os.chown(d / "refused.sh", NOT_ROOT, 0)
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"site_checks:\n  dir: {d}\n")
    return cfg


def _check(cfg: Path, fmt: str):
    return run_cli(["check", "--config", str(cfg), "--only", ",".join(IDS), "--format", fmt])


def test_json_carries_each_verdict_and_code(site: Path) -> None:
    res = _check(site, "json")
    assert res.rc == 1, res.err  # a critical fail closes the gate
    by_id = {c["id"]: c for c in json.loads(res.out)["checks"]}
    assert set(by_id) == set(IDS)
    want = {"site-pass": ("pass", None), "site-warn": ("warn", "site-check-warn"),
            "site-fail": ("fail", "site-check-failed"),
            "site-hang": ("unknown", "site-check-timeout"),
            "site-refused": ("unknown", "site-check-refused"),
            "site-weird": ("unknown", "site-check-unknown"), "site-env": ("pass", None)}
    assert {i: (c["status"], c["code"]) for i, c in by_id.items()} == want
    assert by_id["site-pass"]["summary"] == "all four ports ACTIVE"
    assert by_id["site-warn"]["summary"] == "mlx5_1 port 1 at 100 Gb/s, expected 400"
    assert by_id["site-warn"]["details"]["reported"] == {"port": "mlx5_1/1"}
    assert by_id["site-fail"]["summary"] == "dcgmi diag -r 1: PCIe test failed on GPU 3"
    assert "1s deadline" in by_id["site-hang"]["summary"]
    assert by_id["site-hang"]["severity"] == "warning"  # from the sidecar
    refused = by_id["site-refused"]
    assert f"uid {NOT_ROOT}" in refused["summary"] and "refused.sh" in refused["summary"]
    assert "output" not in refused["details"]  # never run
    assert by_id["site-weird"]["details"]["exit_code"] == 3
    # The clean environment: PATH and LANG, nothing of the agent's (HOME, PYTHONPATH, ...).
    names = {kv.split("=", 1)[0] for kv in by_id["site-env"]["summary"].split()}
    assert names <= {"PATH", "LANG", "PWD", "SHLVL", "_"}, names  # the last three: sh's own
    assert "PATH=/usr/sbin:/usr/bin:/sbin:/bin" in by_id["site-env"]["summary"]
    # timeout(1)'s own code: the 60 s sleep was cut at its 1 s deadline (coreutils manual).
    assert by_id["site-hang"]["details"]["exit_code"] == 124


def test_text_names_each_verdict_and_the_gate(site: Path) -> None:
    res = _check(site, "text")
    assert res.rc == 1
    rows = {m.group(2): m.group(1) for m in re.finditer(r"^  (\S+)\s+(site-\S+)\s", res.out, re.M)}
    assert rows == {"site-pass": "pass", "site-warn": "warn", "site-fail": "FAIL",
                    "site-hang": "UNKNOWN", "site-refused": "UNKNOWN", "site-weird": "UNKNOWN",
                    "site-env": "pass"}
    gate = res.out.strip().splitlines()[-1]
    # Critical by default: fail, refused and weird block; the hang is a warning (sidecar).
    assert gate.startswith("gate dra: CLOSED (blocking: ")
    assert set(gate.split("blocking: ")[1].rstrip(")").split(", ")) == {
        "site-fail", "site-refused", "site-weird"}


def test_metrics_export_each_status(site: Path) -> None:
    from agent.cli_common import load_config, registry, resolve_policy
    from agent.engine import Engine
    from agent.host.build import live_host
    from agent.outputs.metrics import render
    from agent.report import build_report

    config, origin = load_config(str(site))
    checks = [c for c in registry(config) if c.id in IDS]
    assert len(checks) == len(IDS)
    results = Engine(checks).run(live_host(config), resolve_policy(config, origin, "dra"))
    report = build_report(results, "dra", False, "h", 0.0, "1", checks=checks)
    text = render(report, check_details=True).decode()
    severity = {c.id: str(c.severity) for c in checks}  # the site's own, on each status series
    for cid, status in {"site-pass": "pass", "site-warn": "warn", "site-fail": "fail",
                        "site-hang": "unknown", "site-refused": "unknown"}.items():
        row = (f'gpu_node_agent_check_status{{check="{cid}",status="{status}",'
               f'severity="{severity[cid]}"}} 1')
        assert row in text, row
    assert (f'gpu_node_agent_check_status{{check="site-fail",status="pass",'
            f'severity="{severity["site-fail"]}"}} 0') in text
    assert ('gpu_node_agent_check_info{check="site-hang",severity="warning",interval="slow"} 1'
            in text)
