"""The Ansible role's public interface, read as data: every variable in defaults/main.yml is
described in meta/argument_specs.yml with the same default, and every one is prefixed with the
role's name (the prometheus-community convention, ansible-lint's var-naming rule)."""
from pathlib import Path

import yaml

ROLE = Path(__file__).resolve().parents[2] / "ansible" / "roles" / "gpu_node_agent"


def _load(rel: str):
    return yaml.safe_load((ROLE / rel).read_text())


def test_every_default_is_in_the_argument_spec_with_the_same_default():
    defaults = _load("defaults/main.yml")
    options = _load("meta/argument_specs.yml")["argument_specs"]["main"]["options"]
    assert set(defaults) == set(options)
    for name, spec in options.items():
        assert name.startswith("gpu_node_agent_"), name
        assert spec.get("description"), f"{name} has no description"
        if "default" in spec:
            assert spec["default"] == defaults[name], name
        else:  # only optional-without-default variables may omit it
            assert defaults[name] is None and spec.get("required") is False, name


def test_choices_match_the_agent():
    from agent.model import PATHS

    options = _load("meta/argument_specs.yml")["argument_specs"]["main"]["options"]
    assert set(options["gpu_node_agent_allocation_path"]["choices"]) == set(PATHS)


def test_role_internal_variables_are_prefixed():
    for rel in ("vars/main.yml",):
        for name in _load(rel):
            assert name.startswith("_gpu_node_agent_"), f"{rel}: {name}"
