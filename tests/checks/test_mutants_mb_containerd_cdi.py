"""containerd-cdi verdicts in full (summary, fix, details).

By hand from containerd docs/cri/config.md as the check cites it: CDI arrived in 1.7 with
enable_cdi = false by default, 2.x defaults it to true; cdi_spec_dirs defaults to
["/etc/cdi", "/var/run/cdi"]; config version 2 keeps the CRI table under
plugins."io.containerd.grpc.v1.cri", version 3 under plugins."io.containerd.cri.v1.runtime".
The NVIDIA DRA driver writes claim specs to /var/run/cdi (k8s-dra-driver-gpu cdi.go).
"""
from typing import Dict

from agent.host.seam import Host
from agent.hostview import CommandResult
from checks.containerd.containerd_cdi import CONTAINERD_CDI
from tests.checks.answers_support import Answers
from tests.checks.containerd_support import V2X, V17, policy, tree, write_files

ROOT = "/etc/containerd/config.toml"
CRI2 = 'plugins."io.containerd.grpc.v1.cri"'
CRI3 = 'plugins."io.containerd.cri.v1.runtime"'
SPEC = "cdiVersion: 0.6.0\nkind: nvidia.com/gpu\ndevices:\n- name: all\n  containerEdits: {}\n"
V170 = "containerd containerd.io 1.7.0 05044ec0a9a75232cad458027ca83437aae3f4da\n"
DIRS = ["/etc/cdi", "/var/run/cdi"]


def run(h):
    return CONTAINERD_CDI.run(h, policy())


def test_before_1_7_there_is_no_cdi(tmp_path):
    out = run(tree(tmp_path, {ROOT: f"version = 2\n[{CRI2}]\nenable_cdi = true\n"},
                   "containerd containerd.io 1.6.33 abc\n"))
    assert (out.status, out.code) == ("fail", "cdi-unsupported-version")
    assert out.summary == "containerd 1.6.33 has no CDI support (enable_cdi arrived in 1.7)"
    assert out.details["source"] == "own merge with containerd 1.x semantics"


def test_1_7_0_itself_has_cdi(tmp_path):
    out = run(tree(tmp_path, {ROOT: f"version = 2\n[{CRI2}]\nenable_cdi = true\n"}, V170))
    assert out.status == "pass"
    assert out.summary == ("CDI enabled (explicitly); spec dirs ['/etc/cdi', '/var/run/cdi'] "
                           "cover /var/run/cdi")
    d = out.details
    assert (d["enable_cdi"], d["enable_cdi_explicit"], d["cdi_spec_dirs"]) == (True, True, DIRS)
    assert (d["nvidia_spec_dirs"], d["required_dirs"]) == ([], ["/var/run/cdi"])
    assert d["source"] == "own merge with containerd 1.x semantics"


def _fix(table: str) -> str:
    return ('Set enable_cdi = true (and cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]) in '
            f'[plugins."{table}"] of the file containerd loads last for that table (containerd '
            "1.x replaces the whole table per imported file), or run `nvidia-ctk runtime "
            "configure --runtime=containerd --cdi.enabled`; restart containerd.")


def test_cdi_set_to_false_names_the_version_2_table(tmp_path):
    out = run(tree(tmp_path, {ROOT: f"version = 2\n[{CRI2}]\nenable_cdi = false\n"}, V17))
    assert (out.status, out.code) == ("fail", "cdi-disabled")
    assert out.summary == "CDI is disabled in containerd's effective config: enable_cdi set to false"
    assert out.remediation == _fix("io.containerd.grpc.v1.cri")
    assert (out.details["enable_cdi_explicit"], out.details["cdi_spec_dirs"]) == (True, DIRS)


def test_cdi_unset_on_1_7_is_off_by_default(tmp_path):
    out = run(tree(tmp_path, {ROOT: "version = 2\n"}, V17))
    assert out.code == "cdi-disabled"
    assert out.summary == ("CDI is disabled in containerd's effective config: enable_cdi not set "
                           "(containerd 1.7 defaults it to false)")


def test_cdi_set_to_false_in_a_version_3_config_names_the_version_3_table(tmp_path):
    out = run(tree(tmp_path, {ROOT: f"version = 3\n[{CRI3}]\nenable_cdi = false\n"}, V2X))
    assert out.code == "cdi-disabled"
    assert out.remediation == _fix("io.containerd.cri.v1.runtime")


def test_missing_spec_directories_are_all_named(tmp_path):
    files = {ROOT: f'version = 2\n[{CRI2}]\nenable_cdi = true\ncdi_spec_dirs = ["/opt/cdi"]\n',
             "/etc/cdi/nvidia.yaml": SPEC}
    out = run(tree(tmp_path, files, V17))
    assert (out.status, out.code) == ("fail", "cdi-spec-dirs-incomplete")
    assert out.summary == ("cdi_spec_dirs ['/opt/cdi'] do not include /var/run/cdi, /etc/cdi "
                           "(NVIDIA specs / DRA claim specs live there)")
    assert out.remediation == ("Add /var/run/cdi, /etc/cdi to cdi_spec_dirs in containerd's CRI "
                               "config and restart containerd.")
    d = out.details
    assert (d["nvidia_spec_dirs"], d["required_dirs"], d["cdi_spec_dirs"]) == (
        ["/etc/cdi"], ["/var/run/cdi", "/etc/cdi"], ["/opt/cdi"])
    assert d["source"] == "own merge with containerd 1.x semantics"


def test_2x_enables_cdi_by_default_and_covers_every_spec_directory(tmp_path):
    out = run(tree(tmp_path, {ROOT: "version = 2\n", "/etc/cdi/nvidia.yaml": SPEC}, V2X))
    assert out.status == "pass"
    assert out.summary == ("CDI enabled (by default); spec dirs ['/etc/cdi', '/var/run/cdi'] "
                           "cover /var/run/cdi, /etc/cdi")


def _dumped(tmp_path, files: Dict[str, str], dump: str) -> Host:
    write_files(tmp_path, files)
    version = ("containerd", "--version")
    argv = ("containerd", "--config", ROOT, "config", "dump")
    return Host(tmp_path, commands=Answers({version: CommandResult(version, 0, V17),
                                            argv: CommandResult(argv, 0, dump)}))


def test_a_default_the_dump_prints_is_not_one_the_files_set(tmp_path):
    # `config dump` prints every default, enable_cdi = false among them on 1.7
    h = _dumped(tmp_path, {ROOT: "version = 2\n"}, f"version = 2\n[{CRI2}]\nenable_cdi = false\n")
    out = run(h)
    assert out.code == "cdi-disabled"
    assert out.summary == ("CDI is disabled in containerd's effective config: enable_cdi not set "
                           "(containerd 1.7 defaults it to false)")
    assert out.details["source"] == "containerd config dump"


def test_when_our_merge_fails_the_dump_says_what_is_set(tmp_path):
    # our walk stops at the absent import; containerd's dump is the authority
    files = {ROOT: 'version = 2\nimports = ["/etc/containerd/gone.toml"]\n'}
    h = _dumped(tmp_path, files, f"version = 2\n[{CRI2}]\nenable_cdi = true\n")
    out = run(h)
    assert out.status == "pass"
    assert out.summary.startswith("CDI enabled (explicitly); ")
