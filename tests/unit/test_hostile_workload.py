"""gpu-workload's native route with hostile values: an image that ctr would read as a flag,
and CDI spec files (CDI SPEC.md shape) with alias bombs, wrong types and commas that would
split ctr's --mount field. Each test failed on the tree before the fix in
agent/host/workload_native.py."""
import os
from pathlib import Path

import pytest

from agent.config import Config
from agent.host.workload import run_workload, spec_from_config
from agent.host.workload_native import cdi_edits

GOOD = """cdiVersion: "0.6.0"
kind: nvidia.com/gpu
devices:
  - name: all
    containerEdits:
      deviceNodes:
        - path: /dev/nvidia0
containerEdits:
  env: [NVIDIA_VISIBLE_DEVICES=void]
  mounts:
    - hostPath: /usr/bin/nvidia-smi
      containerPath: /usr/bin/nvidia-smi
      options: [ro, nosuid, bind]
"""


def _spec_dir(tmp_path: Path, text: str) -> str:
    d = tmp_path / "cdi"
    d.mkdir()
    (d / "nvidia.yaml").write_text(text)
    return str(d)


def test_a_well_formed_spec_gives_ctr_flags(tmp_path):
    flags, notes = cdi_edits([_spec_dir(tmp_path, GOOD)], "nvidia.com/gpu=all")
    assert flags == [
        "--env=NVIDIA_VISIBLE_DEVICES=void",
        "--mount=type=bind,src=/usr/bin/nvidia-smi,dst=/usr/bin/nvidia-smi,"
        "options=ro:nosuid:rbind",
        "--device=/dev/nvidia0",
    ]
    assert notes == []


def test_an_alias_bomb_spec_is_not_expanded_into_flags(tmp_path):
    # 10**6 strings once expanded, past the bounded loader's 50,000 nodes. Before: the spec
    # loaded (PyYAML shares aliases) and its env list was formatted, alias by alias, into flags.
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 6):
        levels.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    bomb = "\n".join(levels) + "\n" + GOOD.replace(
        "env: [NVIDIA_VISIBLE_DEVICES=void]", "env: *a5")
    with pytest.raises(LookupError, match="unresolvable CDI device"):
        cdi_edits([_spec_dir(tmp_path, bomb)], "nvidia.com/gpu=all")


@pytest.mark.parametrize("edits", [
    "containerEdits: [not, a, mapping]",
    "containerEdits:\n  mounts: [just-a-string]",
    "containerEdits:\n  mounts:\n    - containerPath: /x",
    "containerEdits:\n  deviceNodes: [{}]",
    "containerEdits:\n  env: [{a: b}]",
    # A comma ends ctr's --mount field and starts another option (ctr's mount parser splits
    # type=...,src=...,dst=...,options=... at commas).
    "containerEdits:\n  mounts:\n    - {hostPath: '/x,options=rw', containerPath: /x}",
])
def test_containeredits_of_the_wrong_shape_name_the_file(tmp_path, edits):
    text = GOOD.split("containerEdits:\n  env:")[0] + edits + "\n"
    d = _spec_dir(tmp_path, text)
    with pytest.raises(LookupError, match=r"nvidia\.yaml: containerEdits not in the CDI spec"):
        cdi_edits([d], "nvidia.com/gpu=all")


def test_an_image_starting_with_a_dash_is_never_handed_to_ctr(tmp_path):
    sock = tmp_path / "containerd.sock"
    sock.write_text("")  # run_workload only asks that the socket path exists
    called = tmp_path / "called"
    ctr = tmp_path / "ctr"
    ctr.write_text(f"#!/bin/sh\necho \"$@\" >> {called}\nexit 0\n")
    ctr.chmod(0o755)
    spec = spec_from_config(Config(workload={  # type: ignore[arg-type]
        "paths": ["dra"], "socket": str(sock), "ctr": str(ctr), "route": "native",
        "image": "--plain-http"}))
    assert spec is not None
    rec = run_workload(spec)
    assert rec["failed_step"] == "image"
    assert "workload.image '--plain-http' starts with '-'" in rec["error"]
    assert not called.exists()


def test_a_leftover_directory_named_with_a_pid_too_large_for_kill_is_removed(tmp_path):
    # Before: os.kill(10**20, 0) raised OverflowError out of remove_stale, and every CRI run
    # failed at step "tool" until the directory was removed by hand.
    from agent.host.workload_cri import TEMP_PREFIX, remove_stale

    name = f"{TEMP_PREFIX}{10**20}-x"
    (tmp_path / name).mkdir()
    os.utime(tmp_path / name, (0, 0))  # 1970: older than any deadline
    assert remove_stale(str(tmp_path), 10) == [name]
    assert not (tmp_path / name).exists()
