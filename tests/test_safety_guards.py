"""Safety branches, each with a test that fails when its guard is removed.

- allocation label kept while DRA claims are prepared (and when the label was renamed in the
  config: the old key is kept too), agent/outputs/node/reconcile.py;
- a CDI hook that exists but is not executable fails cdi-spec-current (the container runtime
  execs it: runc's createContainer hook fails with EACCES and so does the container);
- containerd 1.x merge rules (cmd/containerd/server/config/config.go, 1.6/1.7 branches).

Mixed XIDs (a reboot-class XID among reset-class ones advises the reboot) are in
tests/test_xid_policy_table.py; sticky faults with an unreadable boot id and the redaction of
command output have their own tests (tests/unit/test_state.py, tests/unit/test_redact.py).
"""
import json
import os

import pytest

from agent.host.seam import Host, StaticFacts
from agent.model import Status
from agent.outputs.node.reconcile import plan
from checks.containerd.cdi_spec_current import CDI_SPEC_CURRENT
from checks.containerd.config import CRI_V1, CRI_V2, load_effective
from checks.policy import ResolvedPolicy, load_policy
from tests.kube_reports import config, report

ALLOC = "workload.example.com/gpu-allocation"
OLD_ALLOC = "old.example.com/gpu-allocation"
OWNED = "gpu-node-agent.workload.example.com/managed"
T0 = 1_800_000_000.0


def _node(labels, owned):
    return {"metadata": {"name": "gpu-host-1", "resourceVersion": "7", "labels": dict(labels),
                         "annotations": {OWNED: json.dumps(owned)}},
            "spec": {}, "status": {"conditions": []}}


def _label_patch(p):
    return (p.node_patch.get("metadata") or {}).get("labels") or {}


# -- allocation label under prepared DRA claims -------------------------------------------------
@pytest.mark.parametrize("in_use, kept", [
    ({"dra_claims": 2, "device_plugin_pods": 0}, True),
    ({"dra_claims": 0, "device_plugin_pods": 1}, True),
    (None, True),  # allocation-owner could not tell: GPU use unknown
    ({"dra_claims": 0, "device_plugin_pods": 0}, False),
])
def test_allocation_label_guard_keeps_the_label_while_claims_are_prepared(in_use, kept):
    """Mutation 'allocation-label guard removed': with remove_allocation_label_on_failure,
    a failing gate still keeps the label while a DRA claim (or a device-plugin pod) holds
    GPUs, or while that is unknown; only a node with nothing prepared loses it."""
    cfg = config(consecutive_opens=1, remove_allocation_label_on_failure=True)
    owned = {"allocation": ALLOC, "health": "workload.example.com/gpu-healthy",
             "condition": "GPUReady"}
    node = _node({ALLOC: "dra"}, owned)
    p = plan(report({"gpu-xid": "XID 79"}, in_use=in_use), node, cfg.kube, 0, T0)
    if kept:
        assert ALLOC not in _label_patch(p)
        assert p.labels[ALLOC] == "dra"
        assert any(note.startswith(f"{ALLOC} kept") for note in p.notes), p.notes
    else:
        assert _label_patch(p)[ALLOC] is None


@pytest.mark.parametrize("gate_open", [True, False])
@pytest.mark.parametrize("in_use, kept", [
    ({"dra_claims": 1, "device_plugin_pods": 0}, True),
    (None, True),
    ({"dra_claims": 0, "device_plugin_pods": 0}, False),
])
def test_renamed_allocation_label_guard_keeps_the_old_label_while_claims_are_prepared(
        gate_open, in_use, kept):
    """Mutation 'allocation-label guard removed' on the renamed-label branch: the config moved
    the allocation label to a new key; the old key this agent owned (recorded in its
    annotation) is the one the DRA DaemonSet still selects on, so removing it while a claim
    is prepared evicts the kubelet plugin under a running workload."""
    cfg = config(consecutive_opens=1)
    owned = {"allocation": OLD_ALLOC, "health": "workload.example.com/gpu-healthy",
             "condition": "GPUReady"}
    node = _node({OLD_ALLOC: "dra"}, owned)
    rep = report(None if gate_open else {"gpu-ecc": "DBE"}, in_use=in_use)
    p = plan(rep, node, cfg.kube, 1, T0)
    patch = _label_patch(p)
    if kept:
        assert OLD_ALLOC not in patch, patch
        assert any(note.startswith(f"{OLD_ALLOC} (no longer managed) kept") for note in p.notes)
    else:
        assert OLD_ALLOC in patch and patch[OLD_ALLOC] is None, patch
    # the new key follows the gate as usual, and the annotation now records it
    if gate_open:
        assert patch[ALLOC] == "dra"
    else:
        assert ALLOC not in patch
    owned_now = json.loads(p.node_patch["metadata"]["annotations"][OWNED])
    assert owned_now["allocation"] == ALLOC


# -- CDI hooks -----------------------------------------------------------------------------------
HOOK = "/usr/bin/nvidia-cdi-hook"
SPEC = """---
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: '0'
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
      hostPath: /dev/nvidia0
- name: all
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
      hostPath: /dev/nvidia0
containerEdits:
  deviceNodes:
  - path: /dev/nvidiactl
    hostPath: /dev/nvidiactl
  hooks:
  - hookName: createContainer
    path: {hook}
    args:
    - nvidia-cdi-hook
    - update-ldcache
    - --folder
    - /usr/lib/x86_64-linux-gnu
"""


def _cdi_host(tmp_path, hook_mode, hook=HOOK, kind="file"):
    root = tmp_path / "root"
    (root / "proc/driver/nvidia").mkdir(parents=True)
    (root / "proc/driver/nvidia/version").write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue Sep 23 00:00:00 UTC 2025\n")
    (root / "dev").mkdir()
    for node in ("nvidia0", "nvidiactl"):
        (root / "dev" / node).write_text("")
    (root / "var/run/cdi").mkdir(parents=True)
    (root / "var/run/cdi/nvidia.yaml").write_text(SPEC.format(hook=hook))
    target = root / HOOK.lstrip("/")
    target.parent.mkdir(parents=True)
    if kind == "file":
        target.write_text("#!/bin/sh\nexit 0\n")
        os.chmod(target, hook_mode)
    elif kind == "dir":
        target.mkdir(mode=0o755)
    facts = StaticFacts({"dev_nodes": [{"path": "/dev/nvidia0", "major": 195, "minor": 0},
                                        {"path": "/dev/nvidiactl", "major": 195, "minor": 255}]})
    return Host(root, facts=facts)


def _cdi_run(host):
    return CDI_SPEC_CURRENT.run(host, ResolvedPolicy(load_policy(1), "dra"))


def test_executable_cdi_hook_passes(tmp_path):
    out = _cdi_run(_cdi_host(tmp_path, 0o755))
    assert out.status == Status.PASS, out.summary


@pytest.mark.parametrize("mode", [0o644, 0o600, 0o444])
def test_non_executable_cdi_hook_fails(tmp_path, mode):
    """Mutation 'non-executable CDI hook passing': the hook exists but has no execute bit
    (a package unpacked without modes, a copied binary); runc's exec of it fails, so the
    spec is not usable and the check fails naming the hook."""
    out = _cdi_run(_cdi_host(tmp_path, mode))
    assert out.status == Status.FAIL, out.summary
    assert f"references {HOOK}" in out.summary
    assert HOOK in out.details["problems"]["/var/run/cdi/nvidia.yaml"]["missing"]


def test_cdi_hook_that_is_a_directory_fails(tmp_path):
    out = _cdi_run(_cdi_host(tmp_path, 0o755, kind="dir"))
    assert out.status == Status.FAIL and HOOK in out.summary


def test_absent_cdi_hook_fails(tmp_path):
    out = _cdi_run(_cdi_host(tmp_path, 0o755, hook="/usr/local/bin/nvidia-cdi-hook"))
    assert out.status == Status.FAIL and "/usr/local/bin/nvidia-cdi-hook" in out.summary


# -- containerd 1.x merge rules ------------------------------------------------------------------
ROOT_V2 = """version = 2
imports = ["/etc/containerd/conf.d/*.toml"]
root = "/var/lib/containerd"
required_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "/run/containerd/containerd.sock"
  uid = 0
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.internal.v1.opt"]
  path = "/opt/containerd"
"""
DROPIN = """version = 2
root = ""
required_plugins = ["io.containerd.snapshotter.v1.overlayfs"]
[grpc]
  uid = 1000
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
  runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
    BinaryName = "/usr/bin/nvidia-container-runtime"
"""


def _containerd_host(tmp_path, root_text=ROOT_V2, dropin=DROPIN):
    root = tmp_path / "root"
    (root / "etc/containerd/conf.d").mkdir(parents=True)
    (root / "etc/containerd/config.toml").write_text(root_text)
    (root / "etc/containerd/conf.d/99-nvidia.toml").write_text(dropin)
    return Host(root)


def test_containerd_1x_import_replaces_the_whole_plugin_table(tmp_path):
    """Mutation 'a containerd 1.x merge rule': in 1.x (mergo.Merge over
    Plugins map[string]toml.Tree) a plugin table an import defines replaces the root file's
    table of that plugin whole: the drop-in's nvidia runtime arrives, the root file's runc
    runtime, default_runtime_name and sandbox_image are gone."""
    eff = load_effective(_containerd_host(tmp_path), "/etc/containerd/config.toml", 1)
    assert eff.errors == []
    cri = eff.merged["plugins"][CRI_V2]
    assert set(cri["containerd"]["runtimes"]) == {"nvidia"}
    assert "default_runtime_name" not in cri["containerd"]
    assert "sandbox_image" not in cri
    assert eff.plugin_owner[CRI_V2] == "/etc/containerd/conf.d/99-nvidia.toml"
    # a plugin the drop-in does not name keeps the root file's table
    assert eff.merged["plugins"]["io.containerd.internal.v1.opt"] == {"path": "/opt/containerd"}
    assert eff.plugin_owner["io.containerd.internal.v1.opt"] == "/etc/containerd/config.toml"


def test_containerd_2x_merges_the_same_files_key_by_key(tmp_path):
    eff = load_effective(_containerd_host(tmp_path), "/etc/containerd/config.toml", 2)
    # containerd 2.x reads the merged version-2 config as version 3 (containerd's
    # plugins/cri/runtime and plugins/cri/images plugin.go migrations)
    assert eff.cri_key() == "io.containerd.cri.v1.runtime"
    cri = eff.cri()
    assert set(cri["containerd"]["runtimes"]) == {"runc", "nvidia"}
    assert cri["containerd"]["default_runtime_name"] == "runc"
    images = eff.merged["plugins"]["io.containerd.cri.v1.images"]
    assert images["pinned_images"]["sandbox"] == "registry.k8s.io/pause:3.10"


def test_containerd_1x_non_plugin_sections_merge_by_key_and_empty_never_wins(tmp_path):
    """1.x: mergo.WithOverride sets a field only from a non-empty value (root = "" in the
    drop-in keeps the root file's), struct sections such as [grpc] merge field by field,
    and WithAppendSlice appends lists (required_plugins)."""
    eff = load_effective(_containerd_host(tmp_path), "/etc/containerd/config.toml", 1)
    assert eff.merged["root"] == "/var/lib/containerd"
    assert eff.merged["grpc"] == {"address": "/run/containerd/containerd.sock", "uid": 1000}
    assert eff.merged["required_plugins"] == ["io.containerd.grpc.v1.cri",
                                              "io.containerd.snapshotter.v1.overlayfs"]
    assert eff.loaded == ["/etc/containerd/config.toml", "/etc/containerd/conf.d/99-nvidia.toml"]


def test_containerd_1x_version_1_root_uses_the_short_cri_key(tmp_path):
    root_v1 = ROOT_V2.replace("version = 2", "version = 1").replace(
        '"io.containerd.grpc.v1.cri"', '"cri"').replace('plugins."cri"', "plugins.cri")
    dropin_v1 = DROPIN.replace("version = 2", "version = 1").replace(
        'plugins."io.containerd.grpc.v1.cri"', "plugins.cri")
    eff = load_effective(_containerd_host(tmp_path, root_v1, dropin_v1),
                         "/etc/containerd/config.toml", 1)
    assert eff.cri_key() == CRI_V1
    assert set(eff.runtimes()) == {"nvidia"}
