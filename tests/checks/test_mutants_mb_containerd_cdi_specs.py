"""checks/containerd/cdi_specs.py's parsers on hand-written spec data.

From cncf-tags/container-device-interface SPEC.md: containerEdits (top level and per device)
hold deviceNodes (path, and since v0.5.0 hostPath, which is the host side when set), mounts
(hostPath) and hooks (path, args); a spec needs at least one device; device names starting
with a digit and deviceNodes.hostPath arrived in v0.5.0 (specs-go version.go). The NVIDIA CDI
hook takes `--host-driver-version=<version>` (nvidia-ctk cdi generate).
"""
from checks.containerd.cdi_specs import (
    covered_gpu_nodes,
    device_names,
    format_problems,
    parse_spec,
    references,
)


def test_an_error_without_a_line_names_the_file_only():
    # a timestamp PyYAML cannot build fails after parsing: no position to report
    assert parse_spec("a: 2024-13-45\n", "/etc/cdi/x.yaml") == (
        None, "/etc/cdi/x.yaml: invalid YAML (month must be in 1..12)")


def test_references_skip_what_is_not_a_path_and_keep_going():
    data = {"containerEdits": {
        "deviceNodes": ["x", {"permissions": "rw"},
                        {"hostPath": "/dev/nvidia0", "path": "/dev/gpu0"},
                        {"path": "/dev/nvidiactl"}],
        "mounts": ["x", {"hostPath": 5}, {"hostPath": ""},
                   {"hostPath": "/usr/lib/x86_64-linux-gnu/libcuda.so.570.86.15"}],
        "hooks": ["x", {"args": ["--host-driver-version=1.0"]},
                  {"path": "/usr/bin/nvidia-cdi-hook",
                   "args": [5, "nvidia-cdi-hook", "--host-driver-version=570.86.15"]}],
    }}
    refs = references(data)
    assert refs.device_nodes == ["/dev/nvidia0", "/dev/nvidiactl"]  # hostPath before path
    assert refs.mounts == ["/usr/lib/x86_64-linux-gnu/libcuda.so.570.86.15"]
    assert refs.hooks == ["/usr/bin/nvidia-cdi-hook"]
    assert refs.driver_versions == {
        "/usr/lib/x86_64-linux-gnu/libcuda.so.570.86.15": "570.86.15",
        "hook --host-driver-version=1.0": "1.0",
        "hook --host-driver-version=570.86.15": "570.86.15"}


def test_a_spec_without_devices_says_so():
    assert format_problems({"cdiVersion": "0.6.0", "kind": "nvidia.com/gpu"}) == ["no devices"]


def test_pre_0_5_0_features_are_judged_by_what_the_spec_uses():
    old = {"cdiVersion": "0.4.0", "kind": "nvidia.com/gpu",
           "devices": [{"name": "gpu0", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}}]}
    assert format_problems(old) == []
    host_path = {"cdiVersion": "0.4.0", "kind": "nvidia.com/gpu",
                 "devices": [{"name": "gpu0", "containerEdits": {
                     "deviceNodes": [{"path": "/dev/nvidia0", "hostPath": "/dev/nvidia0"}]}}]}
    assert format_problems(host_path) == [
        "uses v0.5.0 features (digit-leading names or hostPath) but declares 0.4.0"]


def test_device_names_skip_devices_without_one():
    assert device_names({"devices": [{"containerEdits": {}}, "x", {"name": "gpu0"}]}) == ["gpu0"]


def test_covered_gpu_nodes_per_gpu_device_in_numeric_order():
    data = {"devices": [
        {"name": "all", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia7"}]}},
        "x",
        {"name": "bad", "containerEdits": "x"},
        {"name": "10", "containerEdits": {"deviceNodes": ["x", {"path": "/dev/nvidia10"}]}},
        {"name": "2", "containerEdits": {"deviceNodes": [{"hostPath": "/dev/nvidia2",
                                                          "path": "/dev/gpu2"}]}},
        {"name": "ctl", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidiactl"}]}},
    ]}
    assert covered_gpu_nodes(data) == ["/dev/nvidia2", "/dev/nvidia10"]


def test_discover_records_what_nvidia_specs_reference_and_skips_what_is_not_a_spec(tmp_path):
    from checks.containerd.cdi_specs import discover
    from tests.checks.containerd_support import tree

    nvidia = ("cdiVersion: 0.6.0\nkind: nvidia.com/gpu\ncontainerEdits:\n"
              "  deviceNodes: [{path: /dev/nvidiactl}]\n"
              "  mounts: [{hostPath: /usr/lib/libcuda.so.570.86.15, containerPath: /x}]\n"
              "  hooks: [{hookName: createContainer, path: /usr/bin/nvidia-cdi-hook}]\n"
              "devices:\n- name: '0'\n  containerEdits:\n    deviceNodes: [{path: /dev/nvidia0}]\n")
    other = ("cdiVersion: 0.6.0\nkind: vendor.com/dev\n"
             "devices:\n- name: a\n  containerEdits:\n    deviceNodes: [{path: /dev/other}]\n")
    host = tree(tmp_path, {"/var/run/cdi/nvidia.yaml": nvidia, "/etc/cdi/vendor.yaml": other,
                           "/etc/cdi/broken.json": "{",
                           "/var/run/cdi/z-nvidia.yaml": nvidia.replace("nvidia0", "nvidia1")})
    (tmp_path / "etc/cdi/a-dir.yaml").mkdir()  # a directory the glob matches: not a spec
    # every NVIDIA spec's references, in spec order, each path once
    assert discover(host) == ([], ["/dev/nvidiactl", "/dev/nvidia0", "/usr/lib/libcuda.so.570.86.15",
                                   "/usr/bin/nvidia-cdi-hook", "/dev/nvidia1"])


def test_an_unreadable_match_does_not_hide_the_specs_after_it(tmp_path):
    from checks.containerd.cdi_specs import load_specs
    from tests.checks.containerd_support import tree

    host = tree(tmp_path, {"/etc/cdi/b.yaml": "cdiVersion: 0.6.0\nkind: nvidia.com/gpu\n"})
    (tmp_path / "etc/cdi/a.yaml").mkdir()
    assert [s.path for s in load_specs(host)] == ["/etc/cdi/b.yaml"]
