"""SKU and firmware fields through the real pynvml: the NVML worker (agent.nvml.worker) and a
bare pynvml script read the simulated libnvidia-ml's PCI device id, board part number, VBIOS,
InfoROM image, power limits and applications clocks, and gpu-sku judges what they read.

Expected values come from the scenario files (tests/nvml_sim/scenarios/sku-*.json, whose
figures are real `nvidia-smi -q` output named in their `provenance`) and nvml.h's documented
return codes (NOT_SUPPORTED for a device without the field, INSUFFICIENT_SIZE for a short
buffer), never from the snapshot under test.
"""
import json
import subprocess
import sys

import pynvml  # its constants only: every NVML call runs in a child process
import pytest

from agent.engine import Engine
from agent.host.seam import Host
from checks.gpu.gpu_sku import GPU_SKU
from checks.nvml_responsive import NVML_RESPONSIVE
from checks.policy import ResolvedPolicy, load_policy

pytestmark = pytest.mark.integration


def test_the_worker_reads_the_real_h100_figures(nvml_sim):
    nvml_sim.use("sku-h100-nvl-among-sxm.json")
    snap = nvml_sim.client().snapshot()
    assert snap["error"] is None and nvml_sim.missing_symbols() == []
    sxm, nvl = snap["gpus"][0], snap["gpus"][5]
    assert sxm["errors"] == {} and nvl["errors"] == {}
    # gpud's nvidia-smi-query.535.183.01: "Device Id : 0x233010DE", "Total : 81559 MiB", ...
    assert (sxm["pci_device_id"], sxm["memory"]["total_bytes"] // 2**20) == (0x233010DE, 81559)
    assert (sxm["board_part_number"], sxm["vbios_version"], sxm["inforom_image_version"]) == (
        "692-2G520-0200-000", "96.00.74.00.01", "G520.0200.00.05")
    assert sxm["power_limit"] == {"limit_mw": 700000, "enforced_mw": 700000}
    assert sxm["applications_clocks"] == {"graphics_mhz": 1980, "memory_mhz": 2619}
    # thamada/nvidia-smi's H100 NVL: "Device Id : 0x232110DE", "Total : 95830 MiB", 310 W.
    assert (nvl["pci_device_id"], nvl["memory"]["total_bytes"] // 2**20) == (0x232110DE, 95830)
    assert nvl["power_limit"]["enforced_mw"] == 310000
    assert nvl["nvlink"] == {"supported": False, "links": []}


PROBE = r"""
import json, pynvml
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
out = {}
def code(fn):
    try:
        fn()
        return 0
    except pynvml.NVMLError as exc:
        return exc.value
out["inforom_missing"] = code(lambda: pynvml.nvmlDeviceGetInforomImageVersion(h))
out["power_missing"] = code(lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(h))
out["sm_clock"] = code(lambda: pynvml.nvmlDeviceGetApplicationsClock(h, pynvml.NVML_CLOCK_SM))
fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetVbiosVersion")
buf = pynvml.create_string_buffer(4)
out["short_buffer"] = fn(h, buf, pynvml.c_uint(4))
print(json.dumps(out))
"""


def test_the_library_answers_as_nvml_h_says(nvml_sim):
    doc = nvml_sim.use("sku-8xh100-sxm.json")
    for key in ("inforom_image_version", "power_limit_mw", "power_enforced_mw"):
        doc["defaults"].pop(key)
    nvml_sim.use(doc)
    res = subprocess.run([sys.executable, "-c", PROBE], env=nvml_sim.env(), capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == {
        "inforom_missing": pynvml.NVML_ERROR_NOT_SUPPORTED,  # "does not have an infoROM"
        "power_missing": pynvml.NVML_ERROR_NOT_SUPPORTED,
        "sm_clock": pynvml.NVML_ERROR_NOT_SUPPORTED,
        "short_buffer": pynvml.NVML_ERROR_INSUFFICIENT_SIZE}


@pytest.mark.parametrize("scenario, status, code", [
    ("sku-8xh100-sxm.json", "pass", None),
    ("sku-h100-nvl-among-sxm.json", "fail", "sku-mixed"),
    ("sku-vbios-not-allowed.json", "fail", "sku-vbios-not-allowed"),
    ("sku-power-limit-low.json", "fail", "sku-power-limit"),
])
def test_gpu_sku_judges_what_the_library_reports(nvml_sim, tmp_path, scenario, status, code):
    nvml_sim.use(scenario)
    (tmp_path / "root").mkdir()
    host = Host(tmp_path / "root", gpus=nvml_sim.source())
    pin = {"gpu": {"sku": {"products": [{
        "product": "H100 SXM5 80GB", "vbios_allowed": ["96.00.74.00.01"],
        "power_limit_w": {"min": 700}}]}}}
    engine = Engine([NVML_RESPONSIVE, GPU_SKU])
    got = {r.id: r for r in engine.run(host, ResolvedPolicy(load_policy(2, pin), "dra"))}
    assert (got["gpu-sku"].status.value, got["gpu-sku"].code) == (status, code)
