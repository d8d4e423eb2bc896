"""checks/containerd/effective.py on Canonical Kubernetes hosts: where the config came from, in
every context, and the "not found" verdict in full.

From canonical/k8s-snap (checks/containerd/snap.py cites it): the snap records its containerd
config in /var/snap/k8s/common/args/containerd (`--config=`) and the lock file
/var/snap/k8s/common/lock/containerd-config-dir; its containerd is
/snap/k8s/current/bin/containerd. A snap host whose recorded config is absent is not running
on containerd's built-in defaults: the verdict is unknown, naming where the agent looked.
"""

from agent.host.seam import Host
from agent.hostview import CommandResult
from checks.containerd.containerd_nvidia_runtime import CONTAINERD_NVIDIA_RUNTIME
from tests.checks.answers_support import Answers
from tests.checks.containerd_support import V17, policy, tree, write_files

ARGS = "/var/snap/k8s/common/args/containerd"
LOCK = "/var/snap/k8s/common/lock/containerd-config-dir"
SNAP_BIN = "/snap/k8s/current/bin/containerd"
CK8S = "/ck8s/etc/containerd/config.toml"
FIX = ("Set containerd.config_path in the agent's config to the file containerd is started with "
       "(`--config` of its service), or collect the bundle on the host itself.")


def test_a_recorded_config_that_is_absent_is_unknown_naming_the_record(tmp_path):
    out = CONTAINERD_NVIDIA_RUNTIME.run(tree(tmp_path, {ARGS: f"--config={CK8S}\n"}, V17), policy())
    assert (out.status, out.code) == ("unknown", "config-not-found")
    assert out.summary == (
        "containerd's config not found at /ck8s/etc/containerd/config.toml: this is a Canonical "
        "Kubernetes host, whose containerd runs on the config the snap records, not on built-in "
        "defaults (looked at: /ck8s/etc/containerd/config.toml, "
        "/var/snap/k8s/common/args/containerd --config)")
    assert out.remediation == FIX
    d = out.details
    assert d["looked_at"] == [CK8S, f"{ARGS} --config"]
    assert (d["source"], d["config_from"], d["config_path"]) == (
        "own merge with containerd 1.x semantics", f"k8s snap: {ARGS} --config", CK8S)


def test_a_snap_host_without_records_names_both_records(tmp_path):
    out = CONTAINERD_NVIDIA_RUNTIME.run(tree(tmp_path, {}, V17, execs=(SNAP_BIN,)), policy())
    assert (out.status, out.code) == ("unknown", "config-not-found")
    assert out.details["looked_at"] == ["/etc/containerd/config.toml", ARGS, LOCK]
    assert out.details["config_from"] == "containerd.config_path"
    assert out.summary.endswith(
        f"(looked at: /etc/containerd/config.toml, {ARGS}, {LOCK})")


def _snap_with_dump(tmp_path, rc: int, stdout: str, stderr: str = "") -> Host:
    write_files(tmp_path, {ARGS: f"--config={CK8S}\n", CK8S: "version = 2\n"})
    version = ("containerd", "--version")
    dump = ("containerd", "--config", CK8S, "config", "dump")
    return Host(tmp_path, commands=Answers({version: CommandResult(version, 0, V17),
                                            dump: CommandResult(dump, rc, stdout, stderr)}))


def test_the_snaps_record_is_named_when_containerd_answers_the_dump(tmp_path):
    out = CONTAINERD_NVIDIA_RUNTIME.run(_snap_with_dump(tmp_path, 0, "version = 2\n"), policy())
    assert (out.status, out.code) == ("fail", "handler-missing")
    assert (out.details["config_from"], out.details["source"]) == (
        f"k8s snap: {ARGS} --config", "containerd config dump")


def test_the_snaps_record_is_named_when_containerd_refuses_its_config(tmp_path):
    out = CONTAINERD_NVIDIA_RUNTIME.run(
        _snap_with_dump(tmp_path, 1, "", "containerd: invalid config\n"), policy())
    assert (out.status, out.code) == ("fail", "config-unloadable")
    assert out.details["config_from"] == f"k8s snap: {ARGS} --config"
