"""Whole hosts composed from the family fixtures (tests/fixtures/make_full_bundles.py): every
registered check passes on its path and the gate is open; breaking one part closes it."""
import shutil

import pytest

from tests.conftest import bundle, run_cli


def _ids():
    from checks.registry import ALL_CHECKS

    return [c.id for c in ALL_CHECKS]


@pytest.mark.parametrize("path", ["dra", "device-plugin"])
def test_every_check_passes_on_a_whole_healthy_host(path):
    res = run_cli(["check", "--bundle", bundle(f"full-healthy-{path}"), "--path", path, "--format", "json"])
    doc = res.json()
    statuses = {c["id"]: c["status"] for c in doc["checks"]}
    assert sorted(statuses) == sorted(_ids())
    assert {cid: s for cid, s in statuses.items() if s != "pass"} == {}
    assert res.rc == 0 and doc["gate"] == {"open": True, "blocking": []}


def test_the_same_host_is_closed_for_the_other_path():
    # full-healthy-dra registers the DRA driver: on device-plugin that owner is wrong.
    res = run_cli(["check", "--bundle", bundle("full-healthy-dra"), "--path", "device-plugin", "--format", "json"])
    assert res.rc == 1 and "allocation-owner" in res.json()["gate"]["blocking"]


def test_removing_the_nvidia_drop_in_closes_the_device_plugin_gate(tmp_path):
    dest = tmp_path / "b"
    shutil.copytree(bundle("full-healthy-device-plugin"), dest, symlinks=True)
    (dest / "root/etc/containerd/conf.d/99-nvidia.toml").unlink()
    res = run_cli(["check", "--bundle", str(dest), "--path", "device-plugin", "--format", "json"])
    assert res.rc == 1 and res.json()["gate"]["blocking"] == ["containerd-nvidia-runtime"]
