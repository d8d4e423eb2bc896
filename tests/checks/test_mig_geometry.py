"""mig-geometry (checks/gpu/mig_geometry.py) on the mig-geometry-* bundles and on hand-written
snapshots, plus gpu.mig_geometry's validation in the config.

Expected values are facts of the scenario files (mig-enabled.json: 8 x H100 80GB, each 7 x
1g.10gb, GPU instance ids 7-13; mig-mixed.json: GPU 0 3g.40gb + 2g.20gb + 2 x 1g.10gb, GPU 1
2 x 3g.40gb, GPUs 2-7 MIG off) and of the bundles' test-config.yaml (families/mig.py).
"""
import json
from typing import Any, Dict, List, Optional

import pytest

from agent.config import Config, parse_config
from agent.engine import Engine
from agent.host.bundle import load_bundle
from agent.host.seam import Host, StaticGpus
from agent.model import SKIP_NOT_APPLICABLE, Status
from checks.gpu.mig_geometry import DISABLED_FIX, FIX, MIG_GEOMETRY
from checks.nvml_responsive import NVML_RESPONSIVE
from checks.policy import ResolvedPolicy, load_policy
from tests.conftest import BUNDLES, bundle, run_cli

H100 = "NVIDIA H100 80GB HBM3"
BUS0, BUS3 = "00000000:1A:00.0", "00000000:4B:00.0"


def check(name: str, path: str = "dra", config_text: Optional[str] = None) -> Dict[str, Any]:
    """The check through the engine (after nvml-responsive, which it requires) over the bundle,
    with its test-config.yaml as `check --bundle B --config B/test-config.yaml` reads it: the
    check is not in checks/registry.py until the registry lists it, so not through the CLI."""
    text = config_text or (BUNDLES / name / "test-config.yaml").read_text()
    cfg = parse_config(text, "test-config.yaml")
    policy = ResolvedPolicy(load_policy(cfg.policy_version), path, settings=cfg.model_dump())
    loaded = load_bundle(bundle(name))
    try:
        results = Engine([NVML_RESPONSIVE, MIG_GEOMETRY]).run(loaded.host, policy)
    finally:
        loaded.close()
    got = {r.id: r for r in results}["mig-geometry"]
    return {"status": got.status.value, "summary": got.summary, "code": got.code,
            "remediation": got.remediation, "skip": got.skip,
            "details": json.loads(json.dumps(got.details))}


@pytest.mark.parametrize("path", ["dra", "device-plugin"])
def test_stated_geometry_met(path):
    got = check("mig-geometry-met", path)
    assert (got["status"], got["summary"]) == ("pass", "MIG geometry as stated on 8 GPU(s)")
    assert got["details"]["per_gpu"]["5"] == {
        "stated_by": f"gpu.mig_geometry['{H100}']", "want": ["1g.10gb"] * 7,
        "have": ["1g.10gb"] * 7}


def test_stated_geometry_unmet_names_gpu_want_and_have():
    got = check("mig-geometry-unmet")
    assert (got["status"], got["code"]) == ("fail", "mig-geometry-unmet")
    # GPU 0's index key beats the product key that the other seven meet.
    assert got["summary"] == (f"GPU 0 ({BUS0}) MIG geometry is 7 x 1g.10gb; "
                              "gpu.mig_geometry[0] wants 2 x 3g.40gb")
    assert got["remediation"] == FIX


def test_mig_disabled_on_a_gpu_with_a_stated_geometry():
    got = check("mig-geometry-mig-disabled")
    assert (got["status"], got["code"]) == ("fail", "mig-geometry-mig-disabled")
    assert got["summary"] == (f"GPU 3 ({BUS3}) has MIG disabled; gpu.mig_geometry[3] states "
                              "7 x 1g.10gb")
    assert got["remediation"] == DISABLED_FIX


def test_mixed_geometry_in_any_order():
    got = check("mig-geometry-mixed")
    assert (got["status"], got["summary"]) == ("pass", "MIG geometry as stated on 2 GPU(s)")
    assert got["details"]["per_gpu"]["0"]["have"] == ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]
    assert sorted(got["details"]["per_gpu"]) == ["0", "1"]  # GPUs 2-7 are not stated


def test_devices_unread_is_unknown():
    got = check("mig-geometry-field-unreadable")
    assert (got["status"], got["code"]) == ("unknown", "field-unreadable")
    assert got["summary"] == (f"cannot read MIG geometry: GPU 0 ({BUS0}) mig.devices: nvml_error "
                              "(Unknown Error)")


def test_malformed_profile_is_unknown_naming_the_field():
    got = check("mig-geometry-snapshot-malformed")
    assert (got["status"], got["code"]) == ("unknown", "snapshot-malformed")
    assert "field gpus[0].mig.devices[0].profile is an integer, expected a string" in got["summary"]


def test_a_config_pinned_to_policy_version_1_skips_it():
    text = (BUNDLES / "mig-geometry-unmet" / "test-config.yaml").read_text()
    got = check("mig-geometry-unmet", config_text="policy_version: 1\n" + text)
    assert (got["status"], got["skip"]) == ("skip", SKIP_NOT_APPLICABLE)
    assert got["summary"] == "a gate of policy version 2; this config pins policy_version 1"


# -- hand-written snapshots ------------------------------------------------------------------
def dev(gi: int, profile: Any, ci: int = 0) -> Dict[str, Any]:
    return {"uuid": f"MIG-{gi}-{ci}", "profile": profile, "gpu_instance_id": gi,
            "compute_instance_id": ci}


def gpu(i: int, devices: Any = None, current: str = "enabled", name: str = H100):
    mig: Dict[str, Any] = {"current": current, "pending": current}
    if devices is not None:
        mig["devices"] = devices
    return {"index": i, "name": name, "pci_bus_id": f"00000000:{i + 16:02X}:00.0", "mig": mig}


def run(gpus: List[Dict[str, Any]], geometry: Dict[str, List[str]]):
    host = Host("/nonexistent-root", gpus=StaticGpus({"gpus": gpus}))
    settings = Config(gpu={"mig_geometry": geometry}).model_dump()
    return MIG_GEOMETRY.run(host, ResolvedPolicy(load_policy(2), "dra", settings=settings))


def test_unset_geometry_is_not_applicable():
    out = run([gpu(0, [dev(7, "1g.10gb")])], {})
    assert (out.status, out.skip, out.summary) == (
        Status.SKIP, SKIP_NOT_APPLICABLE, "no MIG geometry stated (gpu.mig_geometry)")


def test_no_gpu_named_is_not_applicable():
    out = run([gpu(0, [dev(7, "1g.10gb")])], {"NVIDIA A100-SXM4-80GB": ["7g.80gb"]})
    assert (out.status, out.skip) == (Status.SKIP, SKIP_NOT_APPLICABLE)


def test_a_gpu_instance_split_into_compute_instances_counts_once():
    # One 3g.40gb GPU instance with three compute instances (1c.3g.40gb each) is one instance.
    split = [dev(1, "3g.40gb", 0), dev(1, "3g.40gb", 1), dev(1, "3g.40gb", 2), dev(2, "3g.40gb")]
    assert run([gpu(0, split)], {"0": ["3g.40gb", "3g.40gb"]}).status == Status.PASS
    out = run([gpu(0, split)], {"0": ["3g.40gb"] * 4})
    assert out.summary.endswith("MIG geometry is 2 x 3g.40gb; gpu.mig_geometry[0] wants "
                                "4 x 3g.40gb")


def test_index_beats_product_and_product_matches_by_name():
    gpus = [gpu(0, [dev(1, "3g.40gb"), dev(2, "3g.40gb")]), gpu(1, [dev(0, "7g.80gb")])]
    out = run(gpus, {H100: ["7g.80gb"], "0": ["3g.40gb", "3g.40gb"]})
    assert out.status == Status.PASS, out.summary
    out = run(gpus, {H100: ["7g.80gb"]})
    assert out.summary == ("GPU 0 (00000000:10:00.0) MIG geometry is 2 x 3g.40gb; "
                           f"gpu.mig_geometry['{H100}'] wants 1 x 7g.80gb")


def test_an_index_nvml_does_not_report_fails():
    out = run([gpu(0, [dev(0, "7g.80gb")])], {"0": ["7g.80gb"], "9": ["7g.80gb"]})
    assert (out.status, out.code) == (Status.FAIL, "mig-geometry-unmet")
    assert out.summary == "gpu.mig_geometry[9]: NVML reports no GPU 9 (1 GPU(s))"


def test_an_unnamed_profile_never_meets_a_stated_one():
    out = run([gpu(0, [dev(0, None)])], {"0": ["7g.80gb"]})
    assert out.summary.endswith("MIG geometry is 1 x ?; gpu.mig_geometry[0] wants 1 x 7g.80gb")


def test_mig_on_with_no_instance_is_unmet():
    out = run([gpu(0, [])], {"0": ["7g.80gb"]})
    assert out.summary.endswith("MIG geometry is no GPU instance; gpu.mig_geometry[0] wants "
                                "1 x 7g.80gb")


def test_a_gpu_without_mig_that_is_stated_fails():
    unsupported = {"index": 0, "name": "NVIDIA L40S", "pci_bus_id": "00000000:10:00.0",
                   "mig": None, "errors": {"mig": {"kind": "not_supported"}}}
    out = run([unsupported], {"NVIDIA L40S": ["1g.10gb"]})
    assert (out.status, out.code) == (Status.FAIL, "mig-geometry-mig-disabled")
    assert out.summary == ("GPU 0 cannot run MIG (NVML: not supported); "
                           "gpu.mig_geometry['NVIDIA L40S'] states 1 x 1g.10gb")
    # Not stated: not this check's business.
    assert run([unsupported, gpu(1, [dev(0, "7g.80gb")])],
               {"1": ["7g.80gb"]}).status == Status.PASS


def test_devices_absent_without_an_error_is_unknown():
    out = run([gpu(0)], {"0": ["7g.80gb"]})
    assert (out.status, out.code) == (Status.UNKNOWN, "field-unreadable")
    assert out.summary == "cannot read MIG geometry: GPU 0 (00000000:10:00.0) mig.devices: missing"


# -- the config ------------------------------------------------------------------------------
@pytest.mark.parametrize("geometry, problem", [
    ('{"0": [MIG 1g.10gb]}', "'MIG 1g.10gb' is not a MIG profile name"),
    ('{"0": [3g.40]}', "'3g.40' is not a MIG profile name"),
    ('{"0": []}', "'0' lists no profile"),
    ("[1g.10gb]", "Input should be a valid dictionary"),
])
def test_bad_geometry_is_one_line_naming_the_field_exit_2(tmp_path, geometry, problem):
    config = tmp_path / "config.yaml"
    config.write_text(f"gpu:\n  mig_geometry: {geometry}\n")
    res = run_cli(["config", "validate", str(config)])
    assert res.rc == 2
    line = res.err.strip()
    assert "\n" not in line and "gpu.mig_geometry" in line and problem in line
    assert str(config) in line


def test_good_geometry_validates_with_unquoted_index_keys(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("gpu:\n  mig_geometry:\n    0: [1g.10gb+me, 3g.40gb]\n"
                      f"    {H100}: [7g.80gb]\n")
    assert run_cli(["config", "validate", str(config)]).rc == 0
