"""The dev_nodes fact records the IMEX channel nodes (agent/host/tree.py), and collect carries
them into a bundle's host.json, where imex reads them back. Channel nodes are char devices
/dev/nvidia-caps-imex-channels/channelN, major from /proc/devices, minor N (NVIDIA IMEX
Service for NVLink Networks User's Guide, "IMEX Channels")."""
import json
import os
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest

from agent.host import tree

CHANNELS = "dev/nvidia-caps-imex-channels"


@pytest.fixture
def char(monkeypatch):
    """make(path, major, minor): a char device node; mknod where allowed (root), else a plain
    file that agent.host.tree's stat calls see as that char device."""
    faked = {}
    real_stat, real_lstat = os.stat, os.lstat

    def fake(real):
        def call(path, *a, **k):
            if str(path) in faked:
                return SimpleNamespace(st_mode=stat.S_IFCHR | 0o666, st_rdev=faked[str(path)])
            return real(path, *a, **k)
        return call

    def make(path: Path, major: int, minor: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(major, minor))
        except PermissionError:
            path.write_text("")
            faked[str(path)] = os.makedev(major, minor)
            monkeypatch.setattr(tree.os, "stat", fake(real_stat))
            monkeypatch.setattr(tree.os, "lstat", fake(real_lstat))
    return make


def test_dev_nodes_reads_one_level_into_nvidia_directories(tmp_path, char):
    char(tmp_path / "dev/nvidiactl", 195, 255)
    char(tmp_path / CHANNELS / "channel0", 234, 0)
    char(tmp_path / CHANNELS / "channel3", 234, 3)
    (tmp_path / CHANNELS / "README").write_text("a regular file is no device node\n")
    (tmp_path / CHANNELS / "deeper").mkdir()
    char(tmp_path / CHANNELS / "deeper" / "channel9", 234, 9)  # two levels down: not read
    (tmp_path / "dev/other-dir").mkdir()
    char(tmp_path / "dev/other-dir/nvidia-x", 234, 1)  # not an nvidia* directory
    assert tree.dev_nodes(str(tmp_path)) == [
        {"path": "/dev/nvidia-caps-imex-channels/channel0", "major": 234, "minor": 0},
        {"path": "/dev/nvidia-caps-imex-channels/channel3", "major": 234, "minor": 3},
        {"path": "/dev/nvidiactl", "major": 195, "minor": 255},
    ]


def test_a_linked_nvidia_directory_is_not_followed(tmp_path, char):
    outside = tmp_path / "outside"
    char(outside / "channel0", 234, 0)
    (tmp_path / "root/dev").mkdir(parents=True)
    os.symlink(outside, tmp_path / "root" / CHANNELS)
    assert tree.dev_nodes(str(tmp_path / "root")) == []


def test_the_directory_listing_is_capped(tmp_path, char, monkeypatch):
    monkeypatch.setattr(tree, "DEV_DIR_CAP", 2)
    for n in range(3):
        char(tmp_path / CHANNELS / f"channel{n}", 234, n)
    assert len(tree.dev_nodes(str(tmp_path))) == 2


def test_collect_records_the_channels_and_imex_reads_them_back(tmp_path, char):
    from agent.engine import Engine
    from agent.host.build import open_host
    from agent.host.bundle import load_bundle
    from agent.host.collect import collect
    from checks.fabric.imex import IMEX
    from checks.policy import ResolvedPolicy, load_policy

    root = tmp_path / "root"
    char(root / "dev/nvidiactl", 195, 255)
    char(root / CHANNELS / "channel0", 511, 0)
    (root / "proc").mkdir()
    (root / "proc/devices").write_text("Character devices:\n195 nvidia\n"
                                       "234 nvidia-caps-imex-channels\n\nBlock devices:\n8 sd\n")
    with open_host(host_root=str(root)) as host:
        out = collect(host, [IMEX], str(tmp_path / "bundle"))
    facts = json.loads((out / "host.json").read_text())
    assert {"path": "/dev/nvidia-caps-imex-channels/channel0", "major": 511, "minor": 0} \
        in facts["dev_nodes"]
    assert (out / "root/proc/devices").is_file()
    loaded = load_bundle(str(out))
    try:
        policy = ResolvedPolicy(load_policy(2), "dra")
        (result,) = Engine([IMEX]).run(loaded.host, policy)
    finally:
        loaded.close()
    # No systemctl answer under --host-root; the stale major is still reported.
    assert (result.status, result.code) == ("warn", "channel-node-mismatch")
    assert "channel0 has major 511, /proc/devices says 234" in result.summary
