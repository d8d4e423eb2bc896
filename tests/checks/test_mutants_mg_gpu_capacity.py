"""gpu-capacity on the device-plugin paths (checks/allocation/gpu_capacity.py): the whole
Outcome of each branch and host_gpus' parsed value, value by value.

Expected values are written by hand from the module's documented behaviour and its sources:
allocatable (nvidia.com/gpu, .shared, nvidia.com/mig-*) lies between the healthy units and all
units, each times the sharing replicas (k8s-device-plugin ListAndWatch drops unhealthy devices;
README "Shared Access to GPUs": each replica is one allocatable unit); a unit is a GPU, or
under a MIG strategy other than `none` each MIG device of a MIG-enabled GPU (config
gpu.mig_strategy, default "none"); the replicas come from the GFD label
nvidia.com/gpu.replicas or the plugin's config file (api/config/v1 sharing.go,
ReplicatedResource); a GPU is unhealthy when NVML does not answer for it or it has a sticky
fault of this boot no clear covers (agent/xid/state.py cleared: a clear's `classes` lists the
fault classes it covers, a fault without a class is "reset-gpu"; a clear dated by wall time
covers faults at or before it).
"""
from agent.config import Config
from agent.host.seam import Host, StaticFacts, StaticGpus
from agent.model import SKIP_INPUT_MISSING, Outcome, Status
from checks.allocation.gpu_capacity import GPU_CAPACITY, host_gpus
from checks.policy import ResolvedPolicy, load_policy

UUID = "GPU-02000200-0000-4000-8000-00000000000{}"
LOST = "lost: NVML does not answer for it"
DP_CONFIG = "/etc/nvidia-device-plugin/config.yaml"


def gpu(i, mig=None):
    return {"index": i, "uuid": UUID.format(i), "pci_bus_id": f"00000000:{i + 10:02X}:00.0",
            "mig": mig or {"current": "disabled", "pending": "disabled"}}


def snapshot(*entries):
    return {"schema_version": 1, "error": None, "gpus": list(entries),
            "device_count": len(entries)}


def mig_gpu(i, n):
    return gpu(i, {"current": "enabled", "pending": "enabled",
                   "devices": [{"uuid": f"MIG-{i}-{j}"} for j in range(n)]})


def make_host(tmp_path, node, snap, files=None, **facts):
    (tmp_path / "proc/sys/kernel/random").mkdir(parents=True, exist_ok=True)
    (tmp_path / "proc/sys/kernel/random/boot_id").write_text("b1\n")
    for path, text in (files or {}).items():
        p = tmp_path / path.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return Host(tmp_path, facts=StaticFacts({"node": node, **facts}), gpus=StaticGpus(snap))


def node(alloc, labels=None):
    return {"kind": "Node", "metadata": {"name": "n1", "labels": labels or {}},
            "status": {"allocatable": alloc}}


def judge(h, settings=None, **cfg):
    if settings is None:
        settings = Config.model_validate(cfg).model_dump()
    return GPU_CAPACITY.run(h, ResolvedPolicy(load_policy(2), "device-plugin", settings=settings))


def details(alloc, units, healthy, replicas=1, unhealthy=(), strategy="none"):
    return {"allocatable": alloc, "units": units, "healthy_units": healthy,
            "replicas": replicas, "unhealthy": list(unhealthy), "mig_strategy": strategy}


# -- _run and the early skips ----------------------------------------------------------------
def test_a_node_fact_that_is_not_an_object_skips_naming_its_type(tmp_path):
    out = judge(make_host(tmp_path, [1, 2], snapshot(gpu(0))))
    assert out == Outcome(Status.SKIP, "the node fact is not a Node object (list)", {},
                          skip=SKIP_INPUT_MISSING)


def test_no_advertised_gpu_resource_skips_with_nothing_to_compare(tmp_path):
    out = judge(make_host(tmp_path, node({"cpu": "8"}), snapshot(gpu(0))))
    assert out == Outcome(Status.SKIP, "the Node advertises no nvidia.com/gpu yet (the device "
                          "plugin has not registered): nothing to compare", {},
                          skip=SKIP_INPUT_MISSING)


def test_unlisted_mig_devices_under_a_mig_strategy_skip(tmp_path):
    snap = snapshot(gpu(0, {"current": "enabled", "pending": "enabled"}))
    out = judge(make_host(tmp_path, node({"nvidia.com/gpu": "7"}), snap),
                gpu={"mig_strategy": "single"})
    assert out == Outcome(Status.SKIP, "a MIG-enabled GPU's MIG devices are not in the GPU "
                          "snapshot: the units the plugin may advertise are not known", {},
                          skip=SKIP_INPUT_MISSING)


# -- above the host ------------------------------------------------------------------------
def test_above_the_host_without_sharing_says_none_is_configured(tmp_path):
    out = judge(make_host(tmp_path, node({"nvidia.com/gpu": "3"}), snapshot(gpu(0), gpu(1))))
    assert out == Outcome(Status.FAIL, "allocatable nvidia.com/gpu 3 is above the host's 2 GPU(s) "
                          "and no sharing configured",
                          details({"nvidia.com/gpu": 3}, 2, 2), code="allocatable-above-host")


def test_above_the_host_with_two_replicas_names_the_replicas(tmp_path):
    h = make_host(tmp_path, node({"nvidia.com/gpu": "5"}, {"nvidia.com/gpu.replicas": "2"}),
                  snapshot(gpu(0), gpu(1)))
    assert judge(h) == Outcome(
        Status.FAIL, "allocatable nvidia.com/gpu 5 is above the host's 2 GPU(s) x 2 replicas",
        details({"nvidia.com/gpu": 5}, 2, 2, replicas=2), code="allocatable-above-host")


# -- below the healthy ---------------------------------------------------------------------
def test_below_the_healthy_times_the_replicas_fails(tmp_path):
    # 2 GPUs x 2 replicas: 4 healthy units; 3 is below them (and above 2 GPUs alone).
    h = make_host(tmp_path, node({"nvidia.com/gpu": "3"}, {"nvidia.com/gpu.replicas": "2"}),
                  snapshot(gpu(0), gpu(1)))
    assert judge(h) == Outcome(
        Status.FAIL, "allocatable nvidia.com/gpu 3 is below the host's 2 healthy of 2 GPU(s) "
        "x 2 replicas: the kubelet offers fewer than the host has",
        details({"nvidia.com/gpu": 3}, 2, 2, replicas=2), code="allocatable-below-healthy")


# -- within --------------------------------------------------------------------------------
def test_within_range_with_every_gpu_healthy_names_no_unhealthy(tmp_path):
    out = judge(make_host(tmp_path, node({"nvidia.com/gpu": "2"}), snapshot(gpu(0), gpu(1))))
    assert out == Outcome(Status.PASS, "allocatable nvidia.com/gpu 2 within 2..2 (2 GPU(s), "
                          "2 healthy)", details({"nvidia.com/gpu": 2}, 2, 2))


def test_within_range_with_two_replicas_names_them(tmp_path):
    h = make_host(tmp_path, node({"nvidia.com/gpu": "4"}, {"nvidia.com/gpu.replicas": "2"}),
                  snapshot(gpu(0), gpu(1)))
    assert judge(h) == Outcome(Status.PASS, "allocatable nvidia.com/gpu 4 within 4..4 (2 GPU(s), "
                               "2 healthy x 2 replicas)",
                               details({"nvidia.com/gpu": 4}, 2, 2, replicas=2))


def test_two_unhealthy_gpus_are_listed_comma_separated(tmp_path):
    lost = {"kind": "nvml", "code": 15, "name": "gpu_is_lost"}
    snap = snapshot(gpu(0), {"index": 1, "error": lost}, {"index": 2, "error": lost})
    out = judge(make_host(tmp_path, node({"nvidia.com/gpu": "1"}), snap))
    sick = [f"GPU 1 ({LOST})", f"GPU 2 ({LOST})"]
    assert out == Outcome(Status.PASS, "allocatable nvidia.com/gpu 1 within 1..3 (3 GPU(s), "
                          f"1 healthy); unhealthy: GPU 1 ({LOST}), GPU 2 ({LOST})",
                          details({"nvidia.com/gpu": 1}, 3, 1, unhealthy=sick))


def test_mixed_strategy_shows_each_resource_comma_separated(tmp_path):
    alloc = {"nvidia.com/gpu": "1", "nvidia.com/mig-3g.40gb": "2"}
    out = judge(make_host(tmp_path, node(alloc), snapshot(mig_gpu(0, 2), gpu(1))),
                gpu={"mig_strategy": "mixed"})
    assert out == Outcome(
        Status.PASS, "allocatable nvidia.com/gpu 1, nvidia.com/mig-3g.40gb 2 within 3..3 "
        "(3 MIG device(s), 3 healthy)",
        details({"nvidia.com/gpu": 1, "nvidia.com/mig-3g.40gb": 2}, 3, 3, strategy="mixed"))


def test_strategy_none_counts_a_mig_enabled_gpu_as_one_gpu(tmp_path):
    # mig_strategy none: the plugin advertises whole GPUs, MIG mode or not.
    h = make_host(tmp_path, node({"nvidia.com/gpu": "2"}), snapshot(mig_gpu(0, 3), mig_gpu(1, 3)))
    assert judge(h, gpu={"mig_strategy": "none"}) == Outcome(
        Status.PASS, "allocatable nvidia.com/gpu 2 within 2..2 (2 GPU(s), 2 healthy)",
        details({"nvidia.com/gpu": 2}, 2, 2))


def test_without_settings_the_strategy_is_none(tmp_path):
    h = make_host(tmp_path, node({"nvidia.com/gpu": "1"}), snapshot(mig_gpu(0, 3)))
    out = GPU_CAPACITY.run(h, ResolvedPolicy(load_policy(2), "device-plugin"))
    assert out == Outcome(Status.PASS, "allocatable nvidia.com/gpu 1 within 1..1 (1 GPU(s), "
                          "1 healthy)", details({"nvidia.com/gpu": 1}, 1, 1))


# -- the plugin's config file ------------------------------------------------------------
def test_replicas_from_the_configured_plugin_file_count(tmp_path):
    text = ("sharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n"
            "      replicas: 3\n")
    h = make_host(tmp_path, node({"nvidia.com/gpu": "3"}), snapshot(gpu(0)),
                  files={DP_CONFIG: text})
    assert judge(h, gpu={"device_plugin_config_files": [DP_CONFIG]}) == Outcome(
        Status.PASS, "allocatable nvidia.com/gpu 3 within 3..3 (1 GPU(s), 1 healthy x 3 "
        "replicas)", details({"nvidia.com/gpu": 3}, 1, 1, replicas=3))


def test_a_config_file_list_that_is_not_a_list_reads_no_file(tmp_path):
    settings = Config().model_dump()
    settings["gpu"] = {**settings["gpu"], "device_plugin_config_files": None}
    out = judge(make_host(tmp_path, node({"nvidia.com/gpu": "1"}), snapshot(gpu(0))), settings)
    assert out == Outcome(Status.PASS, "allocatable nvidia.com/gpu 1 within 1..1 (1 GPU(s), "
                          "1 healthy)", details({"nvidia.com/gpu": 1}, 1, 1))


# -- host_gpus: health from the sticky faults ----------------------------------------------
def parsed(i, reason=None, mig_enabled=False, mig_uuids=()):
    return {"index": i, "uuid": UUID.format(i), "mig_enabled": mig_enabled,
            "mig_uuids": list(mig_uuids), "healthy": reason is None, "unhealthy_because": reason}


def gpus_of(tmp_path, faults, clears=(), snap=None):
    sticky = {"boot_id": "b1", "faults": list(faults), "clears": list(clears)}
    snap = snap or snapshot(gpu(0), gpu(1))
    return host_gpus(make_host(tmp_path, node({}), snap, sticky=sticky), snap)


def fault(gpu_ref, **kw):
    return {"gpu": gpu_ref, "kind": "xid", "last_mono_us": 100, "message": "Xid 79", **kw}


def test_a_fault_recorded_by_uuid_only_marks_that_gpu(tmp_path):
    out = gpus_of(tmp_path, [fault({"uuid": UUID.format(1)})])
    assert out == [parsed(0), parsed(1, "Xid 79")]


def test_a_fault_without_a_class_is_cleared_as_reset_gpu(tmp_path):
    clear = {"selector": "0", "pci": [], "classes": ["reset-gpu"], "mono_us": 200}
    assert gpus_of(tmp_path, [fault({"index": 0})], [clear]) == [parsed(0), parsed(1)]


def test_a_clear_for_other_classes_leaves_a_reboot_fault(tmp_path):
    clear = {"selector": "0", "pci": [], "classes": ["reset-gpu"], "mono_us": 200}
    out = gpus_of(tmp_path, [fault({"index": 0}, **{"class": "reboot"})], [clear])
    assert out == [parsed(0, "Xid 79"), parsed(1)]


def test_a_wall_clock_clear_covers_only_faults_at_or_before_it(tmp_path):
    clear = {"selector": "0", "pci": [], "classes": None, "at": 200.0}
    newer = fault({"index": 0}, last_mono_us=None, last_at=300.0)
    assert gpus_of(tmp_path, [newer], [clear]) == [parsed(0, "Xid 79"), parsed(1)]
    older = fault({"index": 0}, last_mono_us=None, last_at=100.0)
    assert gpus_of(tmp_path, [older], [clear]) == [parsed(0), parsed(1)]


def test_a_cleared_fault_does_not_stop_the_faults_after_it(tmp_path):
    clear = {"selector": "0", "pci": [], "classes": None, "mono_us": 200}
    out = gpus_of(tmp_path, [fault({"index": 0}), fault({"index": 1}, message="Xid 48")],
                  [clear])
    assert out == [parsed(0), parsed(1, "Xid 48")]


def test_a_fault_without_a_message_is_named_by_its_kind_or_as_a_fault(tmp_path):
    no_message = [{"gpu": {"index": 0}, "kind": "ecc", "last_mono_us": 100},
                  {"gpu": {"index": 1}, "last_mono_us": 100}]
    assert gpus_of(tmp_path, no_message) == [parsed(0, "sticky ecc"), parsed(1, "sticky fault")]


def test_a_fault_message_is_cut_at_120_characters(tmp_path):
    long = "m" * 119 + "LAST-KEPT" + "z" * 20
    out = gpus_of(tmp_path, [fault({"index": 0}, message=long)])
    assert out == [parsed(0, "m" * 119 + "L"), parsed(1)]


def test_the_listed_mig_devices_of_a_mig_disabled_gpu_are_not_its_own(tmp_path):
    # A pending MIG change: NVML may list devices, but only current=enabled makes them units.
    snap = snapshot(gpu(0, {"current": "disabled", "pending": "enabled",
                            "devices": [{"uuid": "MIG-0-0"}]}), mig_gpu(1, 1))
    out = gpus_of(tmp_path, [], snap=snap)
    assert out == [parsed(0), parsed(1, mig_enabled=True, mig_uuids=["MIG-1-0"])]
