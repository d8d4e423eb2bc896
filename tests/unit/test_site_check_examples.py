"""The two example site checks under docs/site-checks/ run against stand-ins (a sysfs tree, a
`dcgmi` on PATH) and read through the agent's own reading of an answer. The sysfs strings are
the kernel's (Documentation/ABI/stable/sysfs-class-infiniband; drivers/infiniband/core/sysfs.c
prints state as "<n>: <NAME>" and rate as "<n> Gb/sec (<width> <speed>)")."""
import subprocess
from pathlib import Path
from typing import Dict, Tuple

import pytest

from agent.hostview import CommandResult
from agent.model import Status
from checks.site.outcome import interpret

DOCS = Path(__file__).resolve().parents[2] / "docs" / "site-checks"


def _run(script: Path, env: Dict[str, str]) -> CommandResult:
    proc = subprocess.run(["/bin/sh", str(script)], capture_output=True, text=True, env=env,
                          timeout=30, stdin=subprocess.DEVNULL)
    return CommandResult(("x",), proc.returncode, proc.stdout, proc.stderr)


def _ib(tmp_path: Path, ports: Dict[str, Tuple[str, str, str]]) -> Path:
    sysfs = tmp_path / "sys"
    for name, (state, rate, layer) in ports.items():
        d = sysfs / name.split("/")[0] / "ports" / name.split("/")[1]
        d.mkdir(parents=True)
        (d / "state").write_text(state + "\n")
        (d / "rate").write_text(rate + "\n")
        (d / "link_layer").write_text(layer + "\n")
    script = tmp_path / "ib-ports.sh"
    text = (DOCS / "ib-ports.sh").read_text()
    assert "SYSFS=/sys/class/infiniband\n" in text
    script.write_text(text.replace("SYSFS=/sys/class/infiniband\n", f"SYSFS={sysfs}\n"))
    return script


NDR = "400 Gb/sec (4X NDR)"
HDR = "200 Gb/sec (4X HDR)"
ETH = ("4: ACTIVE", "100 Gb/sec (4X EDR)", "Ethernet")


@pytest.mark.parametrize("ports, status, code, words", [
    ({"mlx5_0/1": ("4: ACTIVE", NDR, "InfiniBand"), "mlx5_1/1": ("4: ACTIVE", NDR, "InfiniBand"),
      "mlx5_2/1": ETH}, Status.PASS, None, "2 InfiniBand port(s) ACTIVE"),
    ({"mlx5_0/1": ("4: ACTIVE", NDR, "InfiniBand"), "mlx5_1/1": ("1: DOWN", NDR, "InfiniBand")},
     Status.FAIL, "site-check-failed", "mlx5_1/1(1: DOWN)"),
    ({"mlx5_0/1": ("4: ACTIVE", HDR, "InfiniBand")}, Status.WARN, "site-check-warn",
     "mlx5_0/1(200 Gb/sec (4X HDR))"),
    ({"mlx5_2/1": ETH}, Status.FAIL, "site-check-failed", "no InfiniBand port"),
])
def test_ib_ports(tmp_path, ports, status, code, words) -> None:
    res = _run(_ib(tmp_path, ports), {"PATH": "/usr/bin:/bin", "LANG": "C"})
    got = interpret(res, "ib-ports.sh", 10)
    assert (got.status, got.code) == (status, code), res.stdout + res.stderr
    assert words in got.summary


def _dcgmi(tmp_path: Path, stdout: str, rc: int) -> Dict[str, str]:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "dcgmi"
    fake.write_text(f"#!/bin/sh\ncat <<'OUT'\n{stdout}\nOUT\nexit {rc}\n")
    fake.chmod(0o755)
    return {"PATH": f"{bindir}:/usr/bin:/bin", "LANG": "C"}


@pytest.mark.parametrize("stdout, rc, status, code", [
    ('{"tests": [{"name": "Denylist", "results": [{"status": "Pass"}]}]}', 0, Status.PASS, None),
    ('{"tests": [{"name": "PCIe", "results": [{"status": "Warn"}]}]}', 0, Status.WARN,
     "site-check-warn"),
    ('{"tests": [{"name": "PCIe", "results": [{"status": "Fail"}]}]}', 226, Status.FAIL,
     "site-check-failed"),
    ("Error: unable to establish a connection to the specified host: localhost", 255,
     Status.UNKNOWN, "site-check-unknown"),
])
def test_dcgm_diag(tmp_path, stdout, rc, status, code) -> None:
    res = _run(DOCS / "dcgm-diag.sh", _dcgmi(tmp_path, stdout, rc))
    got = interpret(res, "dcgm-diag.sh", 120)
    assert (got.status, got.code) == (status, code), res.stdout + res.stderr


def test_dcgm_diag_without_dcgmi_is_unknown(tmp_path) -> None:
    res = _run(DOCS / "dcgm-diag.sh", {"PATH": str(tmp_path), "LANG": "C"})
    got = interpret(res, "dcgm-diag.sh", 120)
    assert got.code == "site-check-unknown" and "dcgmi not installed" in res.stdout
