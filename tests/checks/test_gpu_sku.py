"""gpu-sku (checks/gpu/gpu_sku.py) on the gpu-sku-* bundles, through the engine as `check
--bundle B --config B/test-config.yaml` runs it (the check is not in checks/registry.py until
the lead registers it, so not through the CLI).

Expected values are written from the sources, not from the check's output:
- the real HGX H100 (tests/fixtures/upstream/gpud.nvidia-smi-q.H100x8.535.183.01.healthy.txt):
  "Device Id : 0x233010DE", "FB Memory Usage / Total : 81559 MiB", "VBIOS Version :
  96.00.74.00.01", "Image Version : G520.0200.00.05", "Current Power Limit : 700.00 W",
  "Applications Clocks: Graphics 1980 MHz, Memory 2619 MHz";
- the H200 capture (thamada/gls gls/H200_smi.py): 0x233510DE, 143771 MiB, 96.00.A5.00.03;
- the scenario files' overrides (tests/nvml_sim/scenarios/sku-*.json) and the bus ids of
  healthy-8xh100.json (GPU 2 00000000:4A:00.0, GPU 3 00000000:4B:00.0, ...).
"""
import json
from typing import Any, Dict, Optional

import pytest

from agent.config import parse_config
from agent.engine import Engine
from agent.host.bundle import load_bundle
from agent.model import Status
from checks.gpu.gpu_sku import GPU_SKU
from checks.nvml_responsive import NVML_RESPONSIVE
from checks.policy import ResolvedPolicy, load_policy
from tests.conftest import BUNDLES, bundle


def check(name: str, config_text: Optional[str] = None, path: str = "dra") -> Dict[str, Any]:
    cfg_file = BUNDLES / name / "test-config.yaml"
    text = config_text if config_text is not None else (
        cfg_file.read_text() if cfg_file.exists() else "")
    cfg = parse_config(text, "test-config.yaml")
    policy = ResolvedPolicy(load_policy(cfg.policy_version, cfg.policy), path,
                            settings=cfg.model_dump())
    loaded = load_bundle(bundle(name))
    try:
        results = Engine([NVML_RESPONSIVE, GPU_SKU]).run(loaded.host, policy)
    finally:
        loaded.close()
    got = {r.id: r for r in results}["gpu-sku"]
    return {"status": got.status.value, "summary": got.summary, "code": got.code,
            "skip": got.skip, "details": json.loads(json.dumps(got.details))}


def test_eight_h100_sxm_as_a_real_one_reports_them_pass():
    got = check("gpu-sku-h100-sxm-pass")
    assert (got["status"], got["summary"]) == (
        "pass", "8 GPU(s) are H100 SXM5 80GB, as pinned (policy gpu.sku)")
    assert got["details"]["per_gpu"]["0"] == {"product": "H100 SXM5 80GB (10de:2330, sxm)",
                                              "pci_device_id": "0x233010DE"}
    assert got["details"]["mismatches"] == []


def test_one_h100_nvl_among_sxm_fails_naming_it():
    got = check("gpu-sku-mixed")
    assert (got["status"], got["code"]) == ("fail", "sku-mixed")
    assert got["summary"] == (
        "GPU 5 (00000000:8B:00.0) H100L 94GB: product H100L 94GB (10de:2321, nvl), want "
        "H100 SXM5 80GB (10de:2330, sxm), the product of 7 GPU(s)")
    assert [m["gpu"] for m in got["details"]["mismatches"]] == [5]


def test_h200_with_143771_mib_passes():
    got = check("gpu-sku-h200-pass")
    assert (got["status"], got["summary"]) == (
        "pass", "8 GPU(s) are H200 SXM 141GB, as pinned (policy gpu.sku)")


def test_h200_one_mib_short_fails_memory():
    got = check("gpu-sku-memory-below")
    assert (got["status"], got["code"]) == ("fail", "sku-memory-below")
    assert got["summary"] == ("GPU 2 (00000000:4A:00.0) H200 SXM 141GB: memory MiB 143770, "
                              "want >= 143771")
    assert got["details"]["mismatches"] == [{
        "gpu": 2, "pci_bus_id": "00000000:4A:00.0", "product": "H200 SXM 141GB",
        "field": "memory MiB", "want": ">= 143771", "have": 143770, "code": "sku-memory-below"}]


def test_vbios_outside_the_allow_list_fails():
    got = check("gpu-sku-vbios-not-allowed")
    assert (got["status"], got["code"]) == ("fail", "sku-vbios-not-allowed")
    assert got["summary"] == ("GPU 3 (00000000:4B:00.0) H100 SXM5 80GB: vbios_version "
                              "96.00.74.00.0D, want one of 96.00.74.00.01")


def test_power_limit_below_the_bound_fails():
    got = check("gpu-sku-power-limit")
    assert (got["status"], got["code"]) == ("fail", "sku-power-limit")
    assert got["summary"] == ("GPU 6 (00000000:CA:00.0) H100 SXM5 80GB: power limit W "
                              "(enforced) 500, want >= 700")


def test_clocks_nvlinks_inforom_and_product_not_pinned():
    assert check("gpu-sku-clocks")["summary"] == (
        "GPU 4 (00000000:8A:00.0) H100 SXM5 80GB: applications clock graphics MHz 1410, "
        "want >= 1980")
    assert check("gpu-sku-nvlink-count")["summary"] == (
        "GPU 1 (00000000:1B:00.0) H100 SXM5 80GB: NVLinks 12, want 18")
    inforom = check("gpu-sku-inforom-not-allowed")
    assert (inforom["code"], len(inforom["details"]["mismatches"])) == (
        "sku-inforom-not-allowed", 8)
    assert inforom["details"]["mismatches"][0]["have"] == "H100.0200.00.04"
    other = check("gpu-sku-product-not-pinned")
    assert (other["code"], other["summary"]) == (
        "sku-product-not-pinned", "GPU 0, 1, 2, 3, 4, 5, 6, 7: H200 SXM 141GB (10de:2335, "
        "sxm); policy gpu.sku pins H100 SXM5 80GB")


def test_nothing_pinned_is_not_applicable():
    got = check("gpu-sku-nothing-pinned")
    assert (got["status"], got["summary"]) == (
        "skip", "no SKU pinned (policy gpu.sku.products is empty)")


def test_policy_version_1_keeps_its_verdict_even_when_pinned():
    got = check("gpu-sku-v1-pinned")
    assert got["status"] == "skip" and "policy version 2" in got["summary"]
    # The same bundle under version 2 fails: the skip is the pin, not the host.
    text = (BUNDLES / "gpu-sku-v1-pinned" / "test-config.yaml").read_text()
    assert check("gpu-sku-v1-pinned", text.replace("policy_version: 1\n", ""))["code"] == (
        "sku-vbios-not-allowed")


def test_unreadable_and_malformed_fields_are_unknown():
    got = check("gpu-sku-field-unreadable")
    assert (got["status"], got["code"]) == ("unknown", "field-unreadable")
    assert "GPU 0 (00000000:1A:00.0) vbios_version: nvml_error" in got["summary"]
    bad = check("gpu-sku-snapshot-malformed")
    assert (bad["status"], bad["code"]) == ("unknown", "snapshot-malformed")
    assert "gpus[0].vbios_version is an integer, expected a string" in bad["summary"]


def test_a_field_not_pinned_is_not_read():
    # The H100 NVML mock profile carries another VBIOS and InfoROM; pinning only the product
    # (memory from the table: 81920 MiB >= 81559) passes.
    pin = "policy:\n  gpu:\n    sku:\n      products:\n      - product: H100 SXM5 80GB\n"
    got = check("gpu-h100-snapshot-only", pin)
    assert got["status"] == Status.PASS.value


@pytest.mark.parametrize("products, field", [
    ([{"product": "H100"}], "gpu.sku.products.0.product"),
    ([{"product": "H100 SXM5 80GB", "power_limit_w": {"min": 700, "max": 600}}],
     "gpu.sku.products.0.power_limit_w"),
    ([{"product": "H200 NVL"}, {"product": "H200 NVL"}], "gpu.sku"),
])
def test_bad_pins_are_refused_naming_the_field(products, field):
    with pytest.raises(Exception) as err:
        load_policy(2, {"gpu": {"sku": {"products": products}}})
    assert field in str(err.value)
