"""docs/gpu-snapshot.md is the hand-written contract: every key a snapshot carries is documented
there, and every error kind the worker or client can emit is in its table."""
import json
import re
from pathlib import Path

from agent.nvml.readers import ERROR_KINDS

REPO = Path(__file__).resolve().parents[2]
DOC = (REPO / "docs" / "gpu-snapshot.md").read_text()
BUNDLES = REPO / "tests" / "fixtures" / "bundles"


def documented(section):
    body = DOC.split(f"## {section}", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([a-z_]+)`", body, flags=re.M))


def test_every_snapshot_key_is_documented():
    top, per_gpu = documented("Top level"), documented("Per GPU")
    for bundle in sorted(BUNDLES.glob("gpu-*/gpus.json")):
        snap = json.loads(bundle.read_text())
        assert set(snap) <= top, (bundle, set(snap) - top)
        for gpu in snap["gpus"]:
            assert set(gpu) <= per_gpu, (bundle, set(gpu) - per_gpu)


def test_the_healthy_snapshot_has_every_documented_gpu_field():
    snap = json.loads((BUNDLES / "gpu-h100-snapshot-only" / "gpus.json").read_text())
    assert documented("Per GPU") - {"error"} == set(snap["gpus"][0])


def test_every_error_kind_is_documented():
    kinds = set(re.findall(r"`([a-z_]+)`", DOC.split("## Errors", 1)[1].split("\n## ", 1)[0]))
    emitted = set(ERROR_KINDS.values()) | {"nvml_error", "worker_error", "worker_failed",
                                           "worker_stuck", "maintenance", "timeout"}
    assert emitted <= kinds, emitted - kinds
