"""The CDI spec parsers (checks/containerd/cdi_specs.py) against container-device-interface's
rules (SPEC.md, pkg/parser, specs-go version.go)."""
from checks.containerd.cdi_specs import covered_gpu_nodes, format_problems, parse_spec


def test_format_rules():
    assert format_problems({"cdiVersion": "0.9.9", "kind": "nvidia.com/gpu", "devices": [{"name": "a"}]}) == ["unsupported cdiVersion '0.9.9'"]
    assert "invalid kind 'nvidia'" in format_problems({"cdiVersion": "0.5.0", "kind": "nvidia", "devices": [{"name": "a"}]})
    assert "invalid device name '-x'" in format_problems({"cdiVersion": "0.5.0", "kind": "a.b/c", "devices": [{"name": "-x"}]})
    # A digit-leading name needs cdiVersion 0.5.0 (container-device-interface version.go).
    assert any("v0.5.0" in p for p in format_problems({"cdiVersion": "0.4.0", "kind": "a.b/c", "devices": [{"name": "0"}]}))


def test_coverage_is_by_device_node_whatever_the_naming_strategy():
    spec = {"devices": [
        {"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}},
        {"name": "GPU-aaaa", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}},
        {"name": "all", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia1"}]}},
    ]}
    assert covered_gpu_nodes(spec) == ["/dev/nvidia0"]


def test_json_spec_errors_name_the_line():
    data, err = parse_spec('{\n "cdiVersion": "0.5.0",\n "kind": }', "/etc/cdi/x.json")
    assert data is None and err.startswith("/etc/cdi/x.json: line 3")
