"""Today's checks with hostile API data and snapshot strings: a ResourceSlice of 100,000
devices (gpu-capacity's summary and details stay bounded, the verdict is unchanged) and a
snapshot whose pci_bus_id is 100,000 characters (gpu-sku's details.mismatches bound it as its
summary does), /proc/devices and dev_nodes numbers int() refuses (imex), an args file of
20,000 `--node-labels` (registration-labels). Each failed on the tree before its fix."""
import copy
import json
from typing import Any, List, Optional

import pytest

from agent.config import Config, parse_config
from agent.host.bundle import load_bundle
from checks.allocation.gpu_capacity import GPU_CAPACITY
from checks.allocation.slices import MAX_LISTED
from checks.fabric.imex import channel_major, read_channels
from checks.gpu.gpu_sku import GPU_SKU
from checks.policy import ResolvedPolicy, load_policy
from tests.conftest import BUNDLES, bundle, run_cli

HOST_UUID = "GPU-01000100-0000-0000-0000-000000000000"


class ApiHost:
    is_live = False

    def __init__(self, slices: Any) -> None:
        self.slices = slices

    def fact(self, name: str) -> Any:
        if name == "node":
            return {"metadata": {"name": "n"}, "status": {"allocatable": {}}}
        return self.slices if name == "resourceslices" else None

    def gpus(self) -> Any:
        return {"schema_version": 1, "source": "nvml", "driver_version": "580.95.05",
                "device_count": 1, "gpus": [{"index": 0, "uuid": HOST_UUID, "name": "H100"}]}

    def boot_id(self) -> Optional[str]:
        return "00000000-0000-0000-0000-000000000000"

    def read_text_or_none(self, path: str) -> Optional[str]:
        return None

    def glob(self, pattern: str) -> List[str]:
        return []

    def is_socket(self, path: str) -> bool:
        return False


def test_a_hundred_thousand_stray_slice_devices_keep_the_summary_short():
    devices = [{"name": f"d{i}", "attributes": {"uuid": {
        "string": f"GPU-{i:08d}-0000-0000-0000-000000000000"}}} for i in range(100_000)]
    host = ApiHost({"items": [{"spec": {"driver": "gpu.nvidia.com", "devices": devices}}]})
    policy = ResolvedPolicy(load_policy(2), "dra",
                            settings=Config(allocation_path="dra").model_dump())
    out = GPU_CAPACITY.run(host, policy)  # type: ignore[arg-type]
    assert (out.status.value, out.code) == ("fail", "slice-device-unknown")
    # The first 8 in sorted order, then the count of the rest (100,000 - 8).
    assert out.summary.startswith("ResourceSlice device UUID(s) the host does not have: "
                                  "GPU-00000000-0000-0000-0000-000000000000, ")
    assert out.summary.endswith(" and 99992 more")
    assert len(out.summary) < 500
    assert out.details["published_count"] == 100_000
    assert len(out.details["published_uuids"]) == MAX_LISTED == 1024
    assert out.details["host_uuids"] == [HOST_UUID] and out.details["host_count"] == 1


def test_a_long_pci_bus_id_is_bounded_in_gpu_sku_details():
    name = "gpu-sku-h100-sxm-pass"
    cfg = parse_config((BUNDLES / name / "test-config.yaml").read_text(), "test-config.yaml")
    policy = ResolvedPolicy(load_policy(cfg.policy_version, cfg.policy), "dra",
                            settings=cfg.model_dump())
    loaded = load_bundle(bundle(name))
    try:
        snap: Any = copy.deepcopy(loaded.host.gpus())
        for gpu in snap["gpus"]:
            gpu["vbios_version"] = "9" * 100_000  # not the pinned 96.00.74.00.01
            gpu["pci_bus_id"] = "0" * 100_000

        class Host:
            def __getattr__(self, attr: str) -> Any:
                return getattr(loaded.host, attr)

            def gpus(self) -> Any:
                return snap

        out = GPU_SKU.run(Host(), policy)
    finally:
        loaded.close()
    assert (out.status.value, out.code) == ("fail", "sku-vbios-not-allowed")
    mismatches = out.details["mismatches"]
    assert len(mismatches) == 8
    # readers.text: 80 characters of a snapshot string; 60 for the value shown.
    assert {m["pci_bus_id"] for m in mismatches} == {"0" * 80}
    assert {m["have"] for m in mismatches} == {"9" * 60}
    assert len(json.dumps(out.details)) < 20_000


# --- imex: numbers from /proc/devices and dev_nodes ------------------------------------------

@pytest.mark.parametrize("line", ["² nvidia-caps-imex-channels", "9" * 5000 +
                                  " nvidia-caps-imex-channels"])
def test_imex_channel_major_that_int_refuses_is_no_major(line):
    # Before: "²".isdigit() is True and int("²") raises; 5,000 digits pass int()'s 4,300 limit.
    assert channel_major(f"Character devices:\n{line}\n") is None


def test_imex_channel_major_in_ascii_digits_is_read():
    # proc(5): "Character devices:" then "<major> <name>" lines.
    assert channel_major("Character devices:\n  1 mem\n508 nvidia-caps-imex-channels\n") == 508


def test_imex_a_channel_node_with_a_huge_number_is_not_a_channel():
    class Nodes:
        def fact(self, name: str) -> Any:
            return [{"path": "/dev/nvidia-caps-imex-channels/channel" + "1" * 5000,
                     "major": 508, "minor": 1}]

        def read_text_or_none(self, path: str) -> Optional[str]:
            return None

    assert read_channels(Nodes()) == ([], [])  # type: ignore[arg-type]


# --- registration-labels: an args file full of --node-labels ----------------------------------

def test_registration_labels_summary_stays_bounded(tmp_path):
    key = "workload.example.com/gpu-allocation"  # agent/config.py's kube.allocation_label
    flags = " ".join(f"--node-labels={key}=v{i}" for i in range(20_000))
    root = tmp_path / "root"
    env = root / "etc/eks/kubelet/environment"
    env.parent.mkdir(parents=True)
    env.write_text(f'NODEADM_KUBELET_ARGS="{flags} --node-labels={key}={"x" * 100_000}"\n')
    res = run_cli(["check", "--host-root", str(root), "--only", "registration-labels",
                   "--format", "json"])
    assert res.rc == 1, res.err
    (got,) = [c for c in res.json()["checks"] if c["id"] == "registration-labels"]
    assert got["status"] == "fail" and got["code"] == "allocation-label-preset"
    assert got["summary"].startswith("a kubelet registration label pre-sets the allocation "
                                     "label, so GPU pods can land before the gate opens: "
                                     f"/etc/eks/kubelet/environment --node-labels sets {key}=v0;")
    assert got["summary"].endswith("; and 19996 more")  # 20,001 entries, 5 shown
    assert len(got["summary"]) < 1500
    assert got["details"]["preset_count"] == 20_001 and len(got["details"]["preset"]) == 64


# --- toolkit-runtime-config: a mode string of 100,000 characters ------------------------------

@pytest.mark.parametrize("path", ["dra", "device-plugin"])
def test_toolkit_runtime_mode_is_shown_cut(tmp_path, path):
    root = tmp_path / "root"
    cfg = root / "etc/nvidia-container-runtime/config.toml"
    cfg.parent.mkdir(parents=True)
    cfg.write_text('[nvidia-container-runtime]\nmode = "' + "x" * 100_000 + '"\n')
    res = run_cli(["check", "--host-root", str(root), "--path", path, "--only",
                   "toolkit-runtime-config", "--format", "json"])
    (got,) = [c for c in res.json()["checks"] if c["id"] == "toolkit-runtime-config"]
    assert got["status"] == "pass", got  # not "cdi": the verdict is unchanged
    assert f"runtime mode '{'x' * 64}'" in got["summary"] and len(got["summary"]) < 400
    assert got["details"]["mode"] == "x" * 64
