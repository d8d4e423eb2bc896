"""GPU sharing on allocation-owner (checks/allocation/sharing.py, the `sharing` policy in
checks/allocation/policy.py), over the sharing fixture bundles and small hand-built hosts.

Expected values are written from the sources, not read back from the code:
- the socket of a resource is "nvidia-" + the name after "nvidia.com/" + ".sock"
  (k8s-device-plugin internal/plugin/server.go), so nvidia.com/gpu.shared (renameByDefault)
  is nvidia-gpu.shared.sock;
- GFD labels nvidia.com/gpu.replicas, nvidia.com/gpu.sharing-strategy, nvidia.com/mps.capable;
- policy version 1 keeps the old verdict (only MPS blocks device-plugin), version 2 allows no
  sharing on device-plugin; the other paths report sharing and pass.
"""
import pytest

from agent.config import Config
from agent.host.seam import Host, StaticFacts, StaticGpus
from checks.allocation.allocation_owner import ALLOCATION_OWNER
from checks.allocation.policy import SharingPolicy
from checks.allocation.sharing import count, evidence
from checks.policy import ResolvedPolicy, load_policy
from tests.checks.bundle_support import run_on_bundle
from tests.conftest import bundle

PATHS = ("device-plugin", "dra", "operator-clusterpolicy", "operator-gpucluster")
DP_DIR = "/var/lib/kubelet/device-plugins/"


def run(name, path, version, config=None):
    cfg = config or Config()
    pol = ResolvedPolicy(load_policy(version), path, settings=cfg.model_dump())
    return run_on_bundle(ALLOCATION_OWNER, name, pol)


# -- the exclusive path under both policy versions ----------------------------------------
@pytest.mark.parametrize("name, evidence_text", [
    ("allocation-owner-timeslicing-socket",
     "/var/lib/kubelet/device-plugins/nvidia-gpu.shared.sock serves nvidia.com/gpu.shared"),
    ("allocation-owner-timeslicing-labels", "nvidia.com/gpu.replicas=4"),
    ("allocation-owner-timeslicing-labels", "nvidia.com/gpu.sharing-strategy=time-slicing"),
    ("allocation-owner-timeslicing-allocatable", "allocatable nvidia.com/gpu 32 on 8 GPU(s)"),
])
def test_time_slicing_fails_the_exclusive_path_in_v2_naming_the_evidence(name, evidence_text):
    out = run(name, "device-plugin", 2)
    assert out.status == "fail" and out.code == "sharing-not-allowed"
    assert evidence_text in out.summary
    assert "time-slicing" in out.summary and "exclusive device-plugin path" in out.summary


@pytest.mark.parametrize("name", ["allocation-owner-timeslicing-socket",
                                  "allocation-owner-timeslicing-labels",
                                  "allocation-owner-timeslicing-allocatable"])
def test_time_slicing_still_passes_under_policy_v1(name):
    out = run(name, "device-plugin", 1)
    assert out.status == "pass"
    assert "sharing: time-slicing (allowed on this path)" in out.summary


@pytest.mark.parametrize("name", ["allocation-owner-timeslicing-labels",
                                  "allocation-owner-timeslicing-socket"])
@pytest.mark.parametrize("path", ["operator-clusterpolicy"])
def test_operator_clusterpolicy_reports_sharing_and_passes(name, path):
    for version in (1, 2):
        out = run(name, path, version)
        assert out.status == "pass" and "sharing: time-slicing" in out.summary
        assert out.details["sharing"]["found"]


def test_mps_fails_the_exclusive_path_in_both_versions_with_its_old_code():
    for version in (1, 2):
        out = run("allocation-owner-mps", "device-plugin", version)
        assert out.status == "fail" and out.code == "mps-blocks-exclusive"
        assert "nvidia.com/mps.capable=true" in out.summary
        assert "nvidia.com/gpu.sharing-strategy=mps" in out.summary
    out = run("kube-mps-capable", "device-plugin", 2)
    assert out.code == "mps-blocks-exclusive"


def test_the_mps_label_alone_keeps_its_old_summary_word_for_word(tmp_path):
    node = {"metadata": {"labels": {"nvidia.com/mps.capable": "true"}}}
    pol = ResolvedPolicy(load_policy(2), "device-plugin", settings=Config().model_dump())
    out = ALLOCATION_OWNER.run(host(tmp_path, sockets=("gpu",), node=node), pol)
    assert out.summary == ("the Node has nvidia.com/mps.capable=true (GPUs shared through MPS), "
                           "which blocks the exclusive device-plugin path")


def test_exclusive_node_passes_with_no_sharing_details():
    for version in (1, 2):
        out = run("allocation-owner-exclusive", "device-plugin", version)
        assert out.status == "pass" and "sharing" not in out.details


def test_v1_pinned_bundle_carries_its_config():
    # the contract runs this bundle with its test-config.yaml: policy_version 1, device-plugin
    import yaml
    with open(bundle("allocation-owner-timeslicing-labels-v1") + "/test-config.yaml") as fh:
        cfg = Config.model_validate(yaml.safe_load(fh))
    assert cfg.policy_version == 1 and cfg.allocation_path == "device-plugin"
    assert run("allocation-owner-timeslicing-labels-v1", "device-plugin", 1, cfg).status == "pass"


# -- the evidence itself --------------------------------------------------------------------
def host(tmp_path, sockets=(), node=None, files=None, gpus=None):
    for name in ("kubelet",) + tuple(sockets):
        p = tmp_path / DP_DIR.lstrip("/") / (f"nvidia-{name}.sock" if name != "kubelet"
                                             else "kubelet.sock")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("")
    for path, text in (files or {}).items():
        p = tmp_path / path.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    facts = {"node": node} if node is not None else {}
    return Host(tmp_path, facts=StaticFacts(facts), gpus=StaticGpus(gpus))


def test_a_mig_resource_socket_is_not_sharing_but_its_shared_rename_is(tmp_path):
    h = host(tmp_path, sockets=("gpu", "mig-1g.10gb", "mig-1g.10gb.shared"))
    found = evidence(h, None, [])["found"]
    assert [f["detail"] for f in found] == [
        "/var/lib/kubelet/device-plugins/nvidia-mig-1g.10gb.shared.sock serves "
        "nvidia.com/mig-1g.10gb.shared (a renamed shared resource)"]


def test_plugin_config_file_names_the_strategy_and_replicas(tmp_path):
    cfg = ("version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n"
           "      replicas: 10\n")
    h = host(tmp_path, sockets=("gpu",), files={"/etc/nvidia-device-plugin/config.yaml": cfg})
    ev = evidence(h, None, ["/etc/nvidia-device-plugin/config.yaml", "/etc/absent.yaml"])
    assert ev["replicas"] == 10
    assert ev["found"] == [{"strategy": "mps", "source": "config",
                            "detail": "/etc/nvidia-device-plugin/config.yaml: mps "
                                      "nvidia.com/gpu replicas 10"}]
    # no config file configured: nothing read
    assert evidence(h, None, [])["found"] == []


def test_config_files_come_from_the_config_and_fail_v2(tmp_path):
    cfg_text = ("sharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n"
                "      replicas: 4\n")
    h = host(tmp_path, sockets=("gpu",), files={"/etc/dp.yaml": cfg_text})
    cfg = Config.model_validate({"gpu": {"device_plugin_config_files": ["/etc/dp.yaml"]}})
    pol = ResolvedPolicy(load_policy(2), "device-plugin", settings=cfg.model_dump())
    out = ALLOCATION_OWNER.run(h, pol)
    assert out.code == "sharing-not-allowed"
    assert "/etc/dp.yaml: time-slicing nvidia.com/gpu replicas 4" in out.summary


def test_broken_config_file_is_reported_not_judged(tmp_path):
    h = host(tmp_path, sockets=("gpu",), files={"/etc/dp.yaml": "sharing: [\n"})
    ev = evidence(h, None, ["/etc/dp.yaml"])
    assert ev["found"] == [] and ev["problems"][0].startswith("/etc/dp.yaml: ")


def test_replicas_one_and_strategy_none_are_not_sharing(tmp_path):
    node = {"metadata": {"labels": {"nvidia.com/gpu.replicas": "1",
                                    "nvidia.com/gpu.sharing-strategy": "none",
                                    "nvidia.com/mps.capable": "false"}}}
    assert evidence(host(tmp_path, node=node), node, [])["found"] == []


def test_allocatable_above_gpus_counts_mig_devices_when_mig_is_on(tmp_path):
    # MIG single: each of 2 GPUs with 7 MIG devices -> 14 units; allocatable 14 is not sharing
    gpus = {"gpus": [{"index": i, "uuid": f"GPU-{i}", "mig": {
        "current": "enabled", "pending": "enabled",
        "devices": [{"uuid": f"MIG-{i}-{j}"} for j in range(7)]}} for i in range(2)]}
    node = {"metadata": {"labels": {}}, "status": {"allocatable": {"nvidia.com/gpu": "14"}}}
    assert evidence(host(tmp_path, node=node, gpus=gpus), node, [])["found"] == []
    node["status"]["allocatable"]["nvidia.com/gpu"] = "15"
    found = evidence(host(tmp_path, node=node, gpus=gpus), node, [])["found"]
    assert [f["detail"] for f in found] == ["allocatable nvidia.com/gpu 15 on 14 GPU(s)"]


def test_quantities_are_whole_device_counts():
    assert [count(v) for v in ("8", 8, "08", "8k", "-1", "1.5", True, None, "")] == [
        8, 8, 8, None, None, None, None, None, None]


def test_policy_section_defaults_and_validation():
    v1, v2 = load_policy(1).sharing, load_policy(2).sharing
    assert v1.allows("device-plugin", "time-slicing") and not v1.allows("device-plugin", "mps")
    assert not v2.allows("device-plugin", "time-slicing") and not v2.allows("device-plugin", "mps")
    for path in PATHS[1:]:
        assert v2.allows(path, "time-slicing") and v2.allows(path, "mps")
    with pytest.raises(ValueError, match="unknown allocation path 'gpu-plugin'"):
        SharingPolicy.model_validate({"allowed": {"gpu-plugin": []}})
    with pytest.raises(ValueError):
        SharingPolicy.model_validate({"allowed": {"dra": ["vgpu"]}})


def test_mig_resource_labels_count_as_sharing_too(tmp_path):
    # GFD labels each MIG resource of the mixed strategy as <resource>.replicas /
    # <resource>.sharing-strategy (internal/lm/resource.go baseLabeler)
    node = {"metadata": {"labels": {"nvidia.com/mig-1g.10gb.replicas": "2",
                                    "nvidia.com/mig-1g.10gb.sharing-strategy": "time-slicing",
                                    "nvidia.com/gpu.replicas": "1",
                                    "nvidia.com/gpu.sharing-strategy": "none"}}}
    ev = evidence(host(tmp_path, node=node), node, [])
    assert ev["replicas"] == 2
    assert [f["detail"] for f in ev["found"]] == [
        "nvidia.com/mig-1g.10gb.replicas=2", "nvidia.com/mig-1g.10gb.sharing-strategy=time-slicing"]
    assert {f["strategy"] for f in ev["found"]} == {"time-slicing"}
