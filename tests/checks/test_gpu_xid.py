"""gpu-xid on fixture bundles: pass, and each way it fails (tests/fixtures/bundles/xid-*).

Expected values are facts of the fixtures: the real log's five XID 119 lines on PCI:0000:9b:00
(GPU 4 in the bundle's snapshot), and the catalog's class of each code.
"""

import json
from pathlib import Path

import pytest

from agent.host.seam import Host, StaticFacts, StaticGpus
from checks.policy import ResolvedPolicy, load_policy
from checks.xid.gpu_xid import GPU_XID
from tests.conftest import bundle, run_cli


def gpu_xid(name, *extra):
    res = run_cli(["check", "--bundle", bundle(name), "--only", "gpu-xid", "--format", "json", *extra])
    assert res.rc in (0, 1), res.err
    doc = res.json()
    (check,) = [c for c in doc["checks"] if c["id"] == "gpu-xid"]
    return res.rc, check


@pytest.mark.parametrize(
    "name, status, needle",
    [
        ("xid-119-real-dmesg", "fail", "GPU 4 (0000:9b:00): XID 119 x5 (needs a GPU reset)"),
        ("xid-119-real-kmsg", "fail", "GPU 4 (0000:9b:00): XID 119 x5 (needs a GPU reset)"),
        ("xid-79-dmesg", "fail", "GPU 7 (0000:db:00): XID 79 (needs a reboot)"),
        ("xid-79-kmsg", "fail", "GPU 7 (0000:db:00): XID 79 (needs a reboot)"),
        ("xid-reset-class-dmesg", "fail", "GPU 5 (0000:bb:00): XID 48, 62, 64, 74, 95, 109, 120, 140"),
        ("xid-reset-class-kmsg", "fail", "GPU 5 (0000:bb:00): XID 48, 62, 64, 74, 95, 109, 120, 140"),
        ("xid-sticky-state", "fail", "GPU 2 (0000:3a:00): XID 48"),
        ("xid-13-repeating", "warn", "GPU 1 (0000:2a:00): XID 13 x12 in 3600s (threshold 10)"),
        ("xid-classes-dmesg", "pass", "7 XID(s) since boot"),
        ("xid-classes-kmsg", "pass", "7 XID(s) since boot"),
        ("xid-none", "pass", "no XID since boot"),
        ("xid-sticky-old-boot", "pass", "no XID since boot"),
        ("xid-cleared", "pass", "(1 cleared)"),
        ("xid-reset-observed", "pass", "(1 cleared)"),
        ("xid-no-kernel-log", "unknown", "kernel log not readable"),
    ],
)
def test_fixture_hosts(name, status, needle):
    rc, check = gpu_xid(name)
    assert check["status"] == status, check["summary"]
    assert needle in check["summary"]
    assert rc == (0 if status in ("pass", "warn") else 1)


def test_reboot_class_gets_the_reboot_fix():
    _, check = gpu_xid("xid-79-kmsg")
    assert "reboot" in check["remediation"] and "nvidia-smi -r" not in check["remediation"]
    _, check = gpu_xid("xid-119-real-kmsg")
    assert "nvidia-smi -r" in check["remediation"] and "gpu-node-agent clear" in check["remediation"]


def test_counts_per_gpu_and_code_in_details():
    _, check = gpu_xid("xid-classes-kmsg")
    assert check["details"]["xid_counts"] == {"0:13": 1, "0:43": 1, "0:45": 1, "1:31": 1, "2:63": 1,
                                              "2:92": 1, "3:94": 1}


def test_config_override_changes_the_class(tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text(json.dumps({"policy": {"xid": {"codes": {119: {"class": "restart-app"}}}}}))
    _, check = gpu_xid("xid-119-real-kmsg", "--config", str(cfg))
    assert check["status"] == "pass"
    cfg.write_text(json.dumps({"policy": {"xid": {"default_threshold": {"count": 20}}}}))
    _, check = gpu_xid("xid-13-repeating", "--config", str(cfg))
    assert check["status"] == "pass"


# The failure code each bundle's situation is (the check's declared failures, checks/xid/gpu_xid.py):
# a reset-gpu XID, a reboot XID (79: the catalog's RESTART_BM), XID 13 twelve times in an hour
# against the default 10/3600 s threshold, no log at all, a log with no kernel-log line.
@pytest.mark.parametrize(
    "name, code",
    [
        ("xid-119-real-kmsg", "xid-needs-reset"),
        ("xid-reset-class-dmesg", "xid-needs-reset"),
        ("xid-sticky-state", "xid-needs-reset"),
        ("xid-79-kmsg", "xid-needs-reboot"),
        ("xid-13-repeating", "xid-repeating"),
        ("xid-no-kernel-log", "kernel-log-unreadable"),
        ("gpu-xid-kernel-log-unrecognised", "kernel-log-unrecognised"),
        ("xid-none", None),
    ],
)
def test_fixture_hosts_name_their_failure_code(name, code):
    _, check = gpu_xid(name)
    assert check["code"] == code, check["summary"]
    if code is not None:
        assert check["status"] == str(GPU_XID.failure(code).status)
    if check["status"] in ("fail", "warn"):
        # an unknown on a bundle gets the engine's "capture it" advice instead (agent/engine.py)
        assert check["remediation"] == GPU_XID.failure(code).fix


def test_unrecognised_kernel_log_is_unknown_not_no_xid():
    _, check = gpu_xid("gpu-xid-kernel-log-unrecognised")
    # the bundle's kmsg.log: four lines of an HTTP error page
    assert check["status"] == "unknown"
    assert check["summary"] == "kernel log has 4 line(s), none in a kernel log format"
    assert check["details"]["kernel_log"] is True and check["details"]["xid_counts"] == {}


def test_a_threshold_set_to_fail_fails_with_its_own_code(tmp_path):
    """The `status: fail` threshold comes from a config: XID 13 twelve times in 3600 s against
    a threshold of 10 that fails; the same with the bundle gpu-xid-threshold-fail's own
    test-config.yaml (the contract run's)."""
    cfg = tmp_path / "config.yaml"
    cfg.write_text(json.dumps({"policy": {"xid": {"codes": {13: {
        "threshold": {"count": 10, "window_s": 3600, "status": "fail"}}}}}}))
    rc, check = gpu_xid("xid-13-repeating", "--config", str(cfg))
    assert (rc, check["status"], check["code"]) == (1, "fail", "xid-repeating-fail")
    assert "XID 13 x12 in 3600s (threshold 10)" in check["summary"]
    assert check["remediation"] == GPU_XID.failure("xid-repeating-fail").fix
    name = "gpu-xid-threshold-fail"
    rc, check = gpu_xid(name, "--config", str(Path(bundle(name)) / "test-config.yaml"))
    assert (rc, check["status"], check["code"]) == (1, "fail", "xid-repeating-fail")
    _, check = gpu_xid(name)  # without it: the built-in 10/h threshold warns
    assert (check["status"], check["code"]) == ("warn", "xid-repeating")


def test_every_declared_failure_names_a_fix_and_a_source():
    codes = [f.code for f in GPU_XID.failures]
    assert len(codes) == len(set(codes)) == 6
    for f in GPU_XID.failures:
        assert f.fix and f.source and f.means, f.code


def test_bad_override_is_a_config_error(tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("policy:\n  xid:\n    codes:\n      13: {class: sometimes}\n")
    res = run_cli(["config", "validate", str(cfg)])
    assert res.rc == 2 and "xid" in res.err


def host(lines, sticky=None, boot="b1", snapshot=None, root=None):
    if root is not None:
        (root / "proc/sys/kernel/random").mkdir(parents=True)
        (root / "proc/sys/kernel/random/boot_id").write_text(boot + "\n")
    return Host(root or "/nonexistent", gpus=StaticGpus(snapshot),
                facts=StaticFacts({"sticky": sticky} if sticky is not None else {}), kmsg=lines)


def policy():
    return ResolvedPolicy(load_policy(1), "dra")


def test_sticky_fault_survives_a_rotated_kernel_log_only_in_its_boot(tmp_path):
    sticky = {"version": 1, "boot_id": "b1", "clears": [], "faults": [
        {"gpu": {"pci": "0000:18:00"}, "kind": "xid", "code": 79, "class": "reboot",
         "last_mono_us": 5, "count": 1}]}
    assert GPU_XID.run(host([], sticky, "b1", root=tmp_path / "a"), policy()).status == "fail"
    assert GPU_XID.run(host([], sticky, "b2", root=tmp_path / "b"), policy()).status == "pass"


def test_the_check_writes_nothing(tmp_path):
    before = sorted(p.name for p in tmp_path.iterdir())
    out = GPU_XID.run(host(["[ 1.0] NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus."],
                           root=tmp_path / "r"), policy())
    assert out.status == "fail"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(before + ["r"])


def test_collect_round_trips_the_kernel_log_and_the_state(tmp_path):
    from agent.host.bundle import load_bundle
    from agent.host.collect import collect
    from agent.xid.kernel_source import DeviceSource
    from agent.xid.kmsg import render

    kmsg = tmp_path / "kmsg"  # a file in /dev/kmsg record format, read by the agent's reader
    kmsg.write_text("3,1,5000000,-;usb 1-1: new device\n"
                    "3,2,6000000,-;NVRM: Xid (PCI:0000:18:00): 119, pid=1, name=x, Timeout\n")
    src = DeviceSource(str(kmsg))
    lines = [render(r) for r in src.poll()]
    src.close()
    assert lines == ["3,2,6000000,-;NVRM: Xid (PCI:0000:18:00): 119, pid=1, name=x, Timeout"]
    sticky = {"version": 1, "boot_id": "b1", "faults": [], "clears": []}
    live_like = host(lines, sticky, "b1", root=tmp_path / "root")
    out = collect(live_like, [GPU_XID], str(tmp_path / "bundle"))
    loaded = load_bundle(out)
    try:
        assert loaded.host.kmsg() == lines and loaded.host.fact("sticky") == sticky
        again = GPU_XID.run(loaded.host, policy())
    finally:
        loaded.close()
    assert again.status == "fail" and "XID 119" in again.summary
