"""`collect` on a live host captures the GPU snapshot the worker reads (gpus.json), and the
bundle evaluates anywhere to the same GPU verdicts."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def test_collect_writes_gpus_json_and_the_bundle_checks_the_same(nvml_sim, tmp_path):
    doc = nvml_sim.use("remap-pending.json")
    config = tmp_path / "config.yaml"
    config.write_text(f"gpu:\n  maintenance_flag: {tmp_path / 'no-flag'}\n")
    out = tmp_path / "bundle"
    res = subprocess.run([sys.executable, "-m", "agent.cli", "collect", "-o", str(out),
                          "--config", str(config)], env=nvml_sim.env(), cwd=REPO,
                         capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr
    snap = json.loads((out / "gpus.json").read_text())
    assert snap["schema_version"] == 1 and snap["error"] is None
    assert [g["uuid"] for g in snap["gpus"]] == [g["uuid"] for g in doc["gpus"]]
    assert snap["gpus"][1]["remapped_rows"]["pending"] is True
    check = subprocess.run([sys.executable, "-m", "agent.cli", "check", "--bundle", str(out),
                            "--only", "gpu-row-remap,gpu-ecc", "--format", "json"],
                           env={k: v for k, v in nvml_sim.env().items() if not k.startswith("LD_")},
                           cwd=REPO, capture_output=True, text=True, timeout=120)
    checks = {c["id"]: c for c in json.loads(check.stdout)["checks"]}
    assert checks["gpu-row-remap"]["status"] == "warn" and "GPU 1" in checks["gpu-row-remap"]["summary"]
    assert checks["gpu-ecc"]["status"] == "pass"
