"""What the GPU checks' tests share (tests/checks/test_<module>.py for checks/gpu/<module>.py):
the GPU checks run over a fixture bundle (tests/fixtures/bundles/gpu-* and <check-id>-*),
whose gpus.json the real worker read from the simulated library
(tests/fixtures/families/gpu.py); expected values are facts of the scenario files."""
import json

from checks.registry import by_id
from tests.conftest import BUNDLES, bundle, run_cli

GPU_IDS = ("nvml-responsive,gpu-count,driver-persistence,fabric-manager,mig-mode,gpu-ecc,"
           "gpu-row-remap,gpu-thermal,gpu-pcie-link,gpu-nvlink")
CRITICAL = {"nvml-responsive", "gpu-count", "mig-mode", "fabric-manager", "gpu-ecc", "gpu-row-remap"}


def results(name, path="dra", config=None, extra=()):
    args = ["check", "--bundle", bundle(name), "--path", path, "--only", GPU_IDS, "--format", "json"]
    if config is not None:
        args += ["--config", str(config)]
    res = run_cli(args + list(extra))
    assert res.rc in (0, 1), res.err
    doc = res.json()
    return res.rc, {c["id"]: c for c in doc["checks"]}, doc


def bus(name, index):
    return json.loads((BUNDLES / name / "gpus.json").read_text())["gpus"][index]["pci_bus_id"]


def each_failure(name, check_id, status, gpu, needle):
    """The body of every test_each_failure: the one check fails as said, naming the GPU,
    every other GPU check passes (or, when the one is nvml-responsive, which owns every
    NVML-level error, skips naming it), and the gate closes only for a critical check."""
    rc, checks, doc = results(name)
    got = checks[check_id]
    assert got["status"] == status, got["summary"]
    assert needle in got["summary"]
    if gpu is not None:
        assert f"GPU {gpu} ({bus(name, gpu)})" in got["summary"]
    if check_id == "nvml-responsive":
        dependents = [c for i, c in checks.items() if i != check_id]
        assert all(c["status"] == "skip" and "nvml-responsive" in c["summary"] for c in dependents)
    else:
        others = {i: c["status"] for i, c in checks.items() if i != check_id}
        assert set(others.values()) == {"pass"}, others
    # Gating (README): critical checks close every path's gate on fail/unknown.
    closes = check_id in CRITICAL and status in ("fail", "unknown")
    assert doc["gate"]["open"] is not closes and rc == (1 if closes else 0)
    assert (check_id in doc["gate"]["blocking"]) is closes
    return got


def code_on(name, check_id, status, code, needle):
    """A code's bundle: the check answers `status` with `code`, the summary says `needle`, and
    the remediation is the declared failure's fix."""
    config = BUNDLES / name / "test-config.yaml"
    _, checks, _ = results(name, config=config if config.exists() else None)
    got = checks[check_id]
    assert (got["status"], got["code"]) == (status, code), got["summary"]
    assert needle in got["summary"]
    fix = by_id()[check_id].failure(code).fix
    if status == "unknown" and got["remediation"] != fix:
        # The engine's own hint when the bundle lacks a read the check declares (the sticky
        # fact, a command): agent/engine_result.py _capture_fix.
        assert got["remediation"].startswith("Not captured in this bundle"), got["remediation"]
    else:
        assert got["remediation"] == fix
    return got
