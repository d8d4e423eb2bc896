"""Whole hosts composed from the family fixtures (tests/fixtures/families/full.py): every
registered check passes on its path and the gate is open; breaking one part closes it."""
import shutil

import pytest

from tests.conftest import bundle, run_cli


def _ids():
    from checks.registry import ALL_CHECKS

    return [c.id for c in ALL_CHECKS]


@pytest.mark.parametrize("path,name", [("dra", "full-healthy-dra"),
                                       ("device-plugin", "full-device-plugin-path")])
def test_every_check_passes_on_a_whole_healthy_host(path, name):
    res = run_cli(["check", "--bundle", bundle(name), "--path", path, "--format", "json"])
    doc = res.json()
    statuses = {c["id"]: c["status"] for c in doc["checks"]}
    assert sorted(statuses) == sorted(_ids())
    # Four checks have nothing to judge on a healthy host that pins no SKU, states no MIG
    # geometry, runs no GPU Operator and asks for no GPU workload; they say so
    # (not-applicable), every other one passes.
    skips = {c["id"]: c["skip"] for c in doc["checks"] if c["status"] == "skip"}
    assert skips == {"gpu-operator": "not-applicable", "mig-geometry": "not-applicable",
                     "gpu-sku": "not-applicable", "gpu-workload": "not-applicable"}
    assert {cid: s for cid, s in statuses.items() if s not in ("pass", "skip")} == {}
    assert res.rc == 0 and doc["gate"] == {"open": True, "blocking": []}


def test_the_same_host_is_closed_for_the_other_path():
    # full-healthy-dra registers the DRA driver: on device-plugin that owner is wrong.
    res = run_cli(["check", "--bundle", bundle("full-healthy-dra"), "--path", "device-plugin", "--format", "json"])
    assert res.rc == 1 and "allocation-owner" in res.json()["gate"]["blocking"]


def test_removing_the_nvidia_drop_in_closes_the_device_plugin_gate(tmp_path):
    dest = tmp_path / "b"
    shutil.copytree(bundle("full-device-plugin-path"), dest, symlinks=True)
    (dest / "root/etc/containerd/conf.d/99-nvidia.toml").unlink()
    res = run_cli(["check", "--bundle", str(dest), "--path", "device-plugin", "--format", "json"])
    # policy version 2 also holds the RuntimeClass's handler against containerd's runtimes
    assert res.rc == 1 and res.json()["gate"]["blocking"] == ["containerd-nvidia-runtime",
                                                              "runtimeclass-handler"]


def test_the_demo_bundles_pass_and_fail_for_one_reason_on_the_default_path():
    # README's first minute: no --path, no --config (the default path is dra).
    ok = run_cli(["check", "--bundle", bundle("demo-ready"), "--format", "json"])
    assert ok.rc == 0 and ok.json()["gate"] == {"open": True, "blocking": []}
    bad = run_cli(["check", "--bundle", bundle("demo-kubelet-too-old"), "--format", "json"])
    doc = bad.json()
    assert bad.rc == 1 and doc["gate"]["blocking"] == ["kubelet-version"]
    kubelet = next(c for c in doc["checks"] if c["id"] == "kubelet-version")
    assert kubelet["status"] == "fail" and "1.33.5" in kubelet["summary"]
    assert [c["id"] for c in doc["checks"] if c["status"] not in ("pass", "skip")] == [
        "kubelet-version"]
    assert {c["id"] for c in doc["checks"] if c["status"] == "skip"} == {
        "gpu-operator", "mig-geometry", "gpu-sku", "gpu-workload"}


def test_every_bundle_named_healthy_or_demo_ready_passes_on_the_default_path():
    from tests.conftest import BUNDLES

    # Whole hosts only: a per-check bundle may say "healthy" of the GPUs it is about
    # (gpu-capacity-7-of-8-one-unhealthy).
    names = [p.name for p in BUNDLES.iterdir()
             if p.name.startswith(("full-", "host-")) and "healthy" in p.name
             or p.name == "demo-ready"]
    assert names
    for name in names:
        res = run_cli(["check", "--bundle", bundle(name), "--format", "json"])
        assert res.rc == 0, (name, res.json()["gate"])
