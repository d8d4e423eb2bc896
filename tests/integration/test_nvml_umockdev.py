"""gpu-count on a "live" host: pyudev enumerates fake NVIDIA PCI devices that umockdev
presents (umockdev-run), and NVML answers through the simulated library."""
import json
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from tests.components import component
from tests.nvml_sim import simlib

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def _device(slot: str, pci_id: str, pci_class: str, driver: str) -> str:
    vendor, device = pci_id.split(":")
    return "\n".join([
        f"P: /devices/pci0000:00/0000:00:01.0/{slot}",
        f"E: DRIVER={driver}",
        f"E: PCI_CLASS={pci_class.lstrip('0')}",
        f"E: PCI_ID={pci_id}",
        f"E: PCI_SLOT_NAME={slot}",
        "E: SUBSYSTEM=pci",
        f"A: class=0x{pci_class}",
        f"A: vendor=0x{vendor.lower()}",
        f"A: device=0x{device.lower()}",
        "",
    ])


def umockdev_file(tmp_path: Path, gpu_slots: List[str], nvswitches: int = 0) -> Path:
    """An umockdev device description (the format umockdev-record writes): H100 SXM5 3D
    controllers (10de:2330, class 0x030200), NVSwitches (10de:22a3, class 0x068000) and one
    non-NVIDIA NIC that must be ignored."""
    parts = [_device(s, "10DE:2330", "030200", "nvidia") for s in gpu_slots]
    parts += [_device(f"0000:0{5 + i}:00.0", "10DE:22A3", "068000", "nvidia-nvswitch")
              for i in range(nvswitches)]
    parts.append(_device("0000:3b:00.0", "15B3:1021", "020700", "mlx5_core"))
    path = tmp_path / "pci.umockdev"
    path.write_text("\n".join(parts))
    return path


def h100_slots(count: int = 8) -> List[str]:
    doc = simlib.resolve("healthy-8xh100.json")
    return [simlib.field(doc, i, "pci_bus_id")[-12:].lower() for i in range(count)]


def run_under_umockdev(devices: Path, args: List[str], env):
    umockdev_run = component("umockdev-run")  # unpacked by .ci/setup.d/20-nvml.sh
    env = {k: v for k, v in env.items() if k != "LD_PRELOAD"}  # umockdev preloads its own
    return subprocess.run([umockdev_run, "-d", str(devices), "--", sys.executable] + args,
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=120)


def test_pyudev_sees_the_fake_nvidia_devices(nvml_sim, tmp_path):
    devices = umockdev_file(tmp_path, h100_slots(), nvswitches=4)
    code = ("import json; from agent.host.live import pci_devices_udev; "
            "from checks.driver.common import nvidia_gpus_on_pci; d = pci_devices_udev(); "
            "print(json.dumps([len(d), len(nvidia_gpus_on_pci(d)), sorted(x['slot'] for x in d)]))")
    res = run_under_umockdev(devices, ["-c", code], nvml_sim.env())
    assert res.returncode == 0, res.stderr
    total, gpus, slots = json.loads(res.stdout)
    assert (total, gpus) == (12, 8)  # 8 GPUs + 4 NVSwitches; the Mellanox NIC is not NVIDIA
    assert set(h100_slots()) <= set(slots)


@pytest.mark.parametrize("scenario, status, needle", [
    ("healthy-8xh100.json", "pass", "8 GPU(s) on PCI and in NVML"),
    ("seven-gpus.json", "fail", "8 NVIDIA GPU(s) on PCI but NVML sees 7 (not in NVML: {slot7})"),
])
def test_gpu_count_on_a_live_host(nvml_sim, tmp_path, scenario, status, needle):
    nvml_sim.use(scenario)
    devices = umockdev_file(tmp_path, h100_slots(8))
    config = tmp_path / "config.yaml"
    config.write_text(f"gpu:\n  maintenance_flag: {tmp_path / 'no-flag'}\n")
    res = run_under_umockdev(devices, ["-m", "agent.cli", "check", "--config", str(config),
                                       "--only", "gpu-count", "--format", "json"], nvml_sim.env())
    assert res.returncode in (0, 1), res.stderr
    checks = {c["id"]: c for c in json.loads(res.stdout)["checks"]}
    assert checks["nvml-responsive"]["status"] == "pass"
    assert checks["gpu-count"]["status"] == status
    assert needle.format(slot7=h100_slots(8)[7]) in checks["gpu-count"]["summary"]
    assert checks["gpu-count"]["details"]["pci"] == 8
