"""Honest skips: every skip names its kind (not-applicable, input-missing, needs:<id>, or the
operator's own `configured`), and a `needs:<id>` skip only happens when the check could not
have judged on its own: one of its declared inputs (files it reads, commands it runs, live
facts, the GPU snapshot, the kernel log) is absent. Walked over every fixture and every path."""
import pytest

from agent.host.build import open_host
from agent.model import PATHS
from checks.gpu.readers import snapshot_problem
from checks.registry import ALL_CHECKS
from tests.conftest import BUNDLES, run_cli

FIXTURES = sorted(p.name for p in BUNDLES.iterdir() if (p / "bundle.yaml").is_file())
BY_ID = {c.id: c for c in ALL_CHECKS}
PLAIN_KINDS = ("not-applicable", "input-missing", "configured")


def _missing_inputs(host, check):
    """The declared inputs of ``check`` this host cannot give (empty = it had them all)."""
    missing = []
    for path in check.reads:
        if not any(ch in path for ch in "*?[") and not host.exists(path):
            missing.append(path)
    for argv in check.runs:
        if not host.run(list(argv), timeout=10).ok:
            missing.append(" ".join(argv))
    missing += [f"fact {name}" for name in check.facts if host.fact(name) is None]
    if check.uses_gpus:
        snap = host.gpus()
        # A snapshot whose structure is malformed (docs/gpu-snapshot.md) is no input either:
        # nvml-responsive reports it (snapshot-malformed) and the GPU checks name it.
        if snap is None or snap.get("error") or snapshot_problem(snap) is not None:
            missing.append("GPU snapshot")
    if check.uses_kmsg and host.kmsg() is None:
        missing.append("kernel log")
    return missing


def _skips(doc):
    """(check id, path, kind, summary) for every skip, on every path the report carries."""
    for c in doc["checks"]:
        if c["status"] == "skip":
            yield c["id"], doc["path"], c["skip"], c["summary"]
        for path, other in c["by_path"].items():
            if other["status"] == "skip":
                yield c["id"], path, other["skip"], other["summary"]


@pytest.mark.parametrize("name", FIXTURES)
def test_no_needs_skip_where_the_check_had_its_own_inputs(name):
    doc = run_cli(["check", "--bundle", str(BUNDLES / name), "--format", "json"]).json()
    dishonest = []
    with open_host(bundle=str(BUNDLES / name)) as host:
        for cid, path, kind, summary in _skips(doc):
            assert kind in PLAIN_KINDS or (
                isinstance(kind, str) and kind.startswith("needs:") and kind[6:] in BY_ID
            ), (name, cid, path, kind)
            if kind.startswith("needs:") and not _missing_inputs(host, BY_ID[cid]):
                dishonest.append(f"{cid} on {path}: {summary}")
    assert not dishonest, f"{name}: needs-skips with every input present: {dishonest}"


def test_walk_sees_every_kind():
    kinds = set()
    for name in FIXTURES:
        doc = run_cli(["check", "--bundle", str(BUNDLES / name), "--format", "json"]).json()
        kinds.update(k.split(":")[0] for _, _, k, _ in _skips(doc))
    assert {"not-applicable", "input-missing", "needs"} <= kinds


def test_version_file_present_and_no_dev_nodes_driver_branch_judges():
    doc = run_cli(["check", "--bundle", str(BUNDLES / "host-driver-560-no-dev-nodes"),
                   "--format", "json"]).json()
    checks = {c["id"]: c for c in doc["checks"]}
    assert checks["driver-loaded"]["status"] == "fail"
    assert "/dev/nvidiactl missing" in checks["driver-loaded"]["summary"]
    # policy_v1.yaml: dra needs R565; R560 is below it, reported in the same run.
    assert checks["driver-branch"]["status"] == "fail"
    assert "below the dra minimum R565" in checks["driver-branch"]["summary"]
    assert checks["driver-library-match"]["status"] == "pass"
    assert doc["gate"]["blocking"][:2] == ["driver-loaded", "driver-branch"]


def test_device_nodes_not_captured_still_judges_the_branch(tmp_path):
    # A bare tree without /dev: driver-loaded is unknown; the branch is still judged.
    root = tmp_path / "root"
    (root / "proc/driver/nvidia").mkdir(parents=True)
    src = BUNDLES / "host-driver-560" / "root/proc/driver/nvidia/version"
    (root / "proc/driver/nvidia/version").write_bytes(src.read_bytes())
    doc = run_cli(["check", "--host-root", str(root), "--only", "driver-branch",
                   "--format", "json"]).json()
    assert {c["id"]: c["status"] for c in doc["checks"]} == {"driver-branch": "fail"}


def test_missing_version_file_is_a_needs_skip_naming_the_owner():
    doc = run_cli(["check", "--bundle", str(BUNDLES / "host-no-driver"), "--format",
                   "json"]).json()
    checks = {c["id"]: c for c in doc["checks"]}
    for cid in ("driver-branch", "driver-library-match"):
        assert checks[cid]["skip"] == "needs:driver-loaded"
    assert checks["driver-loaded"]["status"] == "fail"


def test_configured_skip_has_its_own_kind():
    doc = run_cli(["check", "--bundle", str(BUNDLES / "host-foundation-only"), "--skip", "gpu-xid",
                   "--format", "json"]).json()
    xid = next(c for c in doc["checks"] if c["id"] == "gpu-xid")
    assert (xid["status"], xid["skip"]) == ("skip", "configured")


@pytest.mark.parametrize("path", PATHS)
def test_non_skip_results_carry_no_kind(path):
    doc = run_cli(["check", "--bundle", str(BUNDLES / "full-healthy-dra"), "--path", path,
                   "--format", "json"]).json()
    assert all(c["skip"] is None for c in doc["checks"] if c["status"] != "skip")
