"""gpu-sku's product table (checks/gpu/sku_table.py) and its judgement on hand-built snapshots.

Expected names are pci.ids 2026.05.24's lines for vendor 10de as printed there ("2330  GH100
[H100 SXM5 80GB]", "2321  GH100 [H100L 94GB]", "2335  GH100 [H200 SXM 141GB]", "233b  GH100
[H200 NVL]", "2331  GH100 [H100 PCIe]"); NVML's pciDeviceId packs the device id above the vendor
id (nvml.h nvmlPciInfo_t; `nvidia-smi -q` prints it as "Device Id : 0x233010DE").
"""
from typing import Any, Dict, List

import pytest

from agent.host.seam import Host, StaticGpus
from agent.model import Status
from checks.gpu.gpu_sku import GPU_SKU
from checks.gpu.sku_table import describe, product_of
from checks.policy import ResolvedPolicy, load_policy


@pytest.mark.parametrize("pci_device_id, name, form", [
    (0x233010DE, "H100 SXM5 80GB", "sxm"),
    (0x232110DE, "H100L 94GB", "nvl"),
    (0x233510DE, "H200 SXM 141GB", "sxm"),
    (0x233B10DE, "H200 NVL", "nvl"),
    (0x233110DE, "H100 PCIe", "pcie"),
])
def test_products_by_device_id(pci_device_id, name, form):
    found = product_of(pci_device_id)
    assert found is not None and (found.name, found.form_factor) == (name, form)


def test_vendor_and_unknown_ids():
    assert product_of(0x10DE2330) is None  # halves swapped: vendor 0x2330 is not NVIDIA
    assert product_of(0x233080EE) is None  # 2330 under another vendor
    assert product_of(0x123410DE) is None
    assert describe(0x123410DE) == "unknown (10de:1234)"
    assert describe(0x233010DE) == "H100 SXM5 80GB (10de:2330, sxm)"


def _gpu(index: int, device: int, mib: int) -> Dict[str, Any]:
    return {"index": index, "pci_bus_id": f"00000000:{0x1A + index:02X}:00.0",
            "pci_device_id": device, "memory": {"total_bytes": mib * 2**20, "used_bytes": 0},
            "errors": {}}


def _run(gpus: List[Dict[str, Any]], tmp_path, product: str = "H200 SXM 141GB", **pin: Any):
    (tmp_path / "root").mkdir(exist_ok=True)
    snap = {"schema_version": 1, "source": "nvml", "error": None, "gpus": gpus}
    policy = load_policy(2, {"gpu": {"sku": {"products": [dict(product=product, **pin)]}}})
    return GPU_SKU.run(Host(tmp_path / "root", gpus=StaticGpus(snap)),
                       ResolvedPolicy(policy, "dra"))


@pytest.mark.parametrize("mib, status", [(143771, Status.PASS), (143770, Status.FAIL),
                                         (143772, Status.PASS)])
def test_memory_is_compared_in_mib_exactly(tmp_path, mib, status):
    out = _run([_gpu(0, 0x233510DE, 143771), _gpu(1, 0x233510DE, mib)], tmp_path)
    assert out.status == status


def test_a_pinned_minimum_beats_the_table(tmp_path):
    out = _run([_gpu(0, 0x233510DE, 143771)], tmp_path, memory_mib_min=143772)
    assert (out.status, out.code) == (Status.FAIL, "sku-memory-below")


def test_the_host_product_is_the_pinned_majority(tmp_path):
    gpus = [_gpu(i, 0x233510DE, 143771) for i in range(3)] + [_gpu(3, 0x233B10DE, 143771)]
    out = _run(gpus, tmp_path)
    assert (out.status, out.code) == (Status.FAIL, "sku-mixed")
    assert out.summary.startswith("GPU 3 (00000000:1D:00.0) H200 NVL: product H200 NVL "
                                  "(10de:233b, nvl), want H200 SXM 141GB (10de:2335, sxm)")


def test_a_lost_gpu_is_left_to_gpu_count(tmp_path):
    gpus = [_gpu(0, 0x233510DE, 143771),
            {"index": 1, "error": {"kind": "gpu_lost", "message": "lost", "nvml_code": 15}}]
    out = _run(gpus, tmp_path)
    assert out.status == Status.PASS and "GPU 1 lost (see gpu-count)" in out.summary


def test_a_pinned_field_nvml_does_not_support_is_unknown(tmp_path):
    gpu = _gpu(0, 0x233510DE, 143771)
    gpu["power_limit"] = None
    gpu["errors"] = {"power_limit": {"kind": "not_supported", "message": "Not Supported",
                                     "nvml_code": 3}}
    out = _run([gpu], tmp_path, power_limit_w={"min": 700})
    assert (out.status, out.code) == (Status.UNKNOWN, "field-unreadable")
    assert "power_limit: not_supported" in out.summary
