"""containerd-cgroup-driver verdicts in full (summary, fix, details) and where the kubelet's
driver is read from.

By hand from the check's sources: KEP-4033 (GA in Kubernetes v1.34: with containerd 2.x the
kubelet takes the cgroup driver of containerd's *default* runtime, `default_runtime_name`,
"runc" when unset); otherwise the kubelet's own cgroupDriver (KubeletConfiguration, default
cgroupfs; `--cgroup-driver` wins; `--config` names the file, the last one given counts), then
kubeadm's /var/lib/kubelet/config.yaml and nodeadm's /etc/kubernetes/kubelet/config.json.
"""
from typing import Dict, Optional, Tuple

from agent.host.seam import Host
from agent.hostview import CommandResult
from checks.containerd.cgroup_driver import (
    CONTAINERD_CGROUP_DRIVER,
    kubelet_config_paths,
    kubelet_driver,
)
from tests.checks.answers_support import Answers
from tests.checks.containerd_support import V2X, V17, policy, write_files

ROOT = "/etc/containerd/config.toml"
KCFG = "/var/lib/kubelet/config.yaml"
NODEADM_KCFG = "/etc/kubernetes/kubelet/config.json"
V3 = 'plugins."io.containerd.cri.v1.runtime".containerd'
V2 = 'plugins."io.containerd.grpc.v1.cri".containerd'


def host(tmp_path, files: Dict[str, str], containerd: str, kubelet: Optional[str]) -> Host:
    write_files(tmp_path, files)
    answers: Dict[Tuple[str, ...], CommandResult] = {
        ("containerd", "--version"): CommandResult(("containerd", "--version"), 0, containerd)}
    if kubelet:
        answers[("kubelet", "--version")] = CommandResult(("kubelet", "--version"), 0,
                                                          f"Kubernetes v{kubelet}\n")
    return Host(tmp_path, commands=Answers(answers))


def runtimes(table: str, default: Optional[str] = None, **systemd: bool) -> str:
    text = f"version = {3 if 'cri.v1' in table else 2}\n"
    if default:
        text += f'[{table}]\ndefault_runtime_name = "{default}"\n'
    for name, on in systemd.items():
        text += (f'[{table}.runtimes.{name}]\nruntime_type = "io.containerd.runc.v2"\n'
                 f"[{table}.runtimes.{name}.options]\nSystemdCgroup = {str(on).lower()}\n")
    return text


def run(h):
    return CONTAINERD_CGROUP_DRIVER.run(h, policy())


KEP_RULE = "kubelet takes the cgroup driver from containerd (KEP-4033)"
OWN_RULE = "kubelet uses its own cgroupDriver"


def test_kubelet_1_34_0_takes_the_default_runtimes_driver(tmp_path):
    # the kubelet's own file says cgroupfs: from 1.34.0 on it is not asked
    files = {ROOT: runtimes(V3, nvidia=True, runc=True), KCFG: "cgroupDriver: cgroupfs\n"}
    out = run(host(tmp_path, files, V2X, "1.34.0"))
    assert out.status == "pass"
    assert out.summary == "runtime 'nvidia' and the default runtime 'runc' agree: SystemdCgroup = true"
    d = out.details
    assert (d["source"], d["nvidia_systemd_cgroup"], d["kubelet_version"]) == (
        "own merge with containerd 2.x semantics", True, "1.34.0")
    assert (d["default_runtime"], d["default_systemd_cgroup"], d["rule"]) == ("runc", True, KEP_RULE)


def test_the_configured_default_runtime_is_the_one_compared(tmp_path):
    files = {ROOT: runtimes(V3, default="crun", nvidia=False, runc=True, crun=False)}
    out = run(host(tmp_path, files, V2X, "1.35.1"))
    assert out.status == "pass"
    assert out.summary == "runtime 'nvidia' and the default runtime 'crun' agree: SystemdCgroup = false"
    assert (out.details["default_runtime"], out.details["default_systemd_cgroup"]) == ("crun", False)


def test_differing_from_the_default_runtime_names_both_and_the_fix(tmp_path):
    files = {ROOT: runtimes(V3, nvidia=False, runc=True)}
    out = run(host(tmp_path, files, V2X, None))  # an unknown kubelet is taken as >= 1.34
    assert (out.status, out.code) == ("fail", "nvidia-cgroup-differs-from-default")
    assert out.summary == (
        "runtime 'nvidia' has SystemdCgroup = false but the default runtime 'runc' has true: the "
        "kubelet (>= 1.34) takes its cgroup driver from containerd's default runtime, so GPU pods "
        "fail at start")
    assert out.remediation == ("Set SystemdCgroup = true in the 'nvidia' runtime's options (as the "
                               "default runtime has) and restart containerd.")
    assert (out.details["rule"], out.details["kubelet_version"]) == (KEP_RULE, None)


def test_an_older_kubelet_on_2x_uses_its_own_driver(tmp_path):
    files = {ROOT: runtimes(V3, nvidia=True, runc=False), KCFG: "cgroupDriver: systemd\n"}
    out = run(host(tmp_path, files, V2X, "1.33.5"))
    assert out.status == "pass"
    assert out.summary == ("runtime 'nvidia' SystemdCgroup = true matches the kubelet's systemd "
                           "cgroup driver (/var/lib/kubelet/config.yaml cgroupDriver)")
    d = out.details
    assert (d["kubelet_cgroup_driver"], d["kubelet_cgroup_driver_from"], d["rule"]) == (
        "systemd", "/var/lib/kubelet/config.yaml cgroupDriver", OWN_RULE)
    assert (d["kubelet_version"], d["source"], d["nvidia_systemd_cgroup"]) == (
        "1.33.5", "own merge with containerd 2.x semantics", True)


def test_differing_from_the_kubelet_says_which_way_to_set_it(tmp_path):
    files = {ROOT: runtimes(V2, nvidia=True), KCFG: "cgroupDriver: cgroupfs\n"}
    out = run(host(tmp_path, files, V17, None))
    assert (out.status, out.code) == ("fail", "nvidia-cgroup-differs-from-kubelet")
    assert out.summary == (
        "runtime 'nvidia' has SystemdCgroup = true but the kubelet uses the cgroupfs cgroup driver "
        "(/var/lib/kubelet/config.yaml cgroupDriver): GPU pods fail at start")
    assert out.remediation == (
        "Set SystemdCgroup = false in the 'nvidia' runtime's options and restart containerd (or "
        "change the kubelet's cgroupDriver in /var/lib/kubelet/config.yaml).")
    assert out.details["rule"] == OWN_RULE
    files = {ROOT: runtimes(V2, nvidia=False), NODEADM_KCFG: '{"cgroupDriver": "systemd"}'}
    out = run(host(tmp_path / "b", files, V17, "1.31.2"))
    assert out.code == "nvidia-cgroup-differs-from-kubelet"
    assert out.remediation == (
        "Set SystemdCgroup = true in the 'nvidia' runtime's options and restart containerd (or "
        "change the kubelet's cgroupDriver in /etc/kubernetes/kubelet/config.json).")


def test_an_unreadable_kubelet_config_is_unknown_naming_it(tmp_path):
    files = {ROOT: runtimes(V2, nvidia=True), KCFG: "cgroupDriver: [systemd\n"}
    out = run(host(tmp_path, files, V17, None))
    assert (out.status, out.code) == ("unknown", "kubelet-config-unreadable")
    assert out.summary == ("cannot tell the kubelet's cgroup driver: /var/lib/kubelet/config.yaml: "
                           "line 2: did not find expected ',' or ']'")
    assert out.details["rule"] == OWN_RULE


def test_no_kubelet_config_is_input_missing(tmp_path):
    out = run(host(tmp_path, {ROOT: runtimes(V2, nvidia=True)}, V17, None))
    assert out.status == "skip"
    assert out.summary == ("the kubelet's cgroup driver is not known yet (no kubelet config "
                           "(/var/lib/kubelet/config.yaml, /etc/kubernetes/kubelet/config.json))")
    assert out.details["rule"] == OWN_RULE


def test_where_the_kubelets_driver_is_read(tmp_path):
    # only nodeadm's file: the absent first default does not end the search
    h = host(tmp_path, {NODEADM_KCFG: '{"cgroupDriver": "systemd"}'}, V17, None)
    assert kubelet_driver(h) == ("systemd", "/etc/kubernetes/kubelet/config.json cgroupDriver")
    # a file that is not a mapping sets nothing: the default cgroupfs
    h = host(tmp_path / "l", {KCFG: "- a\n- b\n"}, V17, None)
    assert kubelet_driver(h) == ("cgroupfs", "/var/lib/kubelet/config.yaml (cgroupDriver unset: cgroupfs)")


def test_the_last_config_flag_names_the_file(tmp_path):
    h = host(tmp_path, {"/etc/default/kubelet": 'KUBELET_EXTRA_ARGS="--config=/a.yaml --config=/b.yaml"\n'},
             V17, None)
    assert kubelet_config_paths(h) == ["/b.yaml", KCFG, NODEADM_KCFG]
