"""kubelet-version, outcome by outcome: which of the two kubelet binaries answers, which
failure is named, and the exact Outcome at the minimum's edge.

Expected values are written by hand from the module's KUBELET_ARGVS (`kubelet --version`, then
Canonical Kubernetes' /snap/k8s/current/bin/kubelet, docs/kubernetes.md), policy_v1.yaml's
kubelet minimum (1.34.2 on dra and operator-gpucluster, none elsewhere) and
agent/hostview.py CommandResult.describe (`<argv>` exited <rc>: <first stderr line>).
"""
from agent.host.bundle import RecordedCommands
from agent.host.seam import Host
from agent.model import Outcome, Status
from checks.kubelet_version import KUBELET_VERSION
from checks.policy import ResolvedPolicy, load_policy

KUBELET = ["kubelet", "--version"]
SNAP = ["/snap/k8s/current/bin/kubelet", "--version"]


def run(tmp_path, records, path="dra"):
    tmp_path.mkdir(parents=True, exist_ok=True)
    host = Host(tmp_path, commands=RecordedCommands(records, "test"))
    return KUBELET_VERSION.run(host, ResolvedPolicy(load_policy(1), path))


def rec(argv, rc=0, stdout="", stderr=""):
    return {"argv": argv, "rc": rc, "stdout": stdout, "stderr": stderr}


def test_the_snap_kubelet_answers_when_none_is_on_the_path(tmp_path):
    out = run(tmp_path, [rec(KUBELET, 127, stderr="not found"),
                         rec(SNAP, 0, "Kubernetes v1.34.2\n")])
    assert out == Outcome(Status.PASS, "kubelet 1.34.2 >= 1.34.2",
                          {"version": "1.34.2", "binary": "/snap/k8s/current/bin/kubelet"})


def test_a_kubelet_that_fails_is_named_when_the_other_is_absent(tmp_path):
    out = run(tmp_path / "a", [rec(KUBELET, 127, stderr="not found"),
                               rec(SNAP, 1, stderr="boom\nmore")])
    assert out == Outcome(Status.UNKNOWN, "cannot read the kubelet version: "
                          "`/snap/k8s/current/bin/kubelet --version` exited 1: boom",
                          code="kubelet-version-unreadable")
    out = run(tmp_path / "b", [rec(KUBELET, 2, stderr="bad flag"),
                               rec(SNAP, 127, stderr="not found")])
    assert out == Outcome(Status.UNKNOWN, "cannot read the kubelet version: "
                          "`kubelet --version` exited 2: bad flag",
                          code="kubelet-version-unreadable")


def test_both_absent_on_a_gated_path_fail_with_the_missing_code(tmp_path):
    out = run(tmp_path, [rec(KUBELET, 127), rec(SNAP, 127)], "operator-gpucluster")
    assert out == Outcome(Status.FAIL, "kubelet not installed (the operator-gpucluster path "
                          "needs >= 1.34.2)", code="kubelet-missing")


def test_one_patch_below_the_minimum_fails_with_the_too_old_code(tmp_path):
    out = run(tmp_path, [rec(KUBELET, 0, "Kubernetes v1.34.1\n")])
    assert out == Outcome(Status.FAIL, "kubelet 1.34.1 is below 1.34.2 required for DRA on the "
                          "dra path", {"version": "1.34.1", "binary": "kubelet",
                                       "minimum": "1.34.2"}, code="kubelet-too-old")


def test_unrecognised_output_has_the_unreadable_code(tmp_path):
    out = run(tmp_path, [rec(KUBELET, 0, "Kubernetes vX\n")])
    assert (out.status, out.code) == (Status.UNKNOWN, "kubelet-version-unreadable")
