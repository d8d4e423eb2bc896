"""Per-path truth: the `gates` a report carries for every path, in the JSON and in the metric
gpu_node_agent_gate_open{path}, are what `check --path P` alone decides, for every fixture
host and all four allocation paths (five evaluations per fixture, compared)."""
import json
import re
import time

import jsonschema
import pytest

from agent.model import PATHS
from tests.conftest import BUNDLES, REPO, run_cli

SCHEMA = json.loads((REPO / "docs/report.schema.json").read_text())

FIXTURES = sorted(p.name for p in BUNDLES.iterdir() if (p / "bundle.yaml").is_file())
_GATE_METRIC = re.compile(r'^gpu_node_agent_gate_open\{path="([^"]+)"\} (\S+)$', re.M)


def _alone(name: str, path: str) -> dict:
    res = run_cli(["check", "--bundle", str(BUNDLES / name), "--path", path, "--format", "json"])
    assert res.rc in (0, 1), res.err
    doc = res.json()
    assert doc["path"] == path
    assert res.rc == (0 if doc["gate"]["open"] else 1)
    return doc["gate"]


def _metric_gates(name: str) -> dict:
    """The default-path report rendered as metrics, through the same pieces `run` uses."""
    from agent.cli import resolve_policy
    from agent.config import Config
    from agent.engine import Engine
    from agent.host.build import open_host
    from agent.outputs import metrics
    from agent.report import build_report
    from checks.registry import ALL_CHECKS

    config = Config()
    policy = resolve_policy(config, None, config.allocation_path)
    with open_host(bundle=str(BUNDLES / name)) as host:
        results = Engine(ALL_CHECKS).run(host, policy)
        report = build_report(results, config.allocation_path, False, "h", time.time(), "t",
                              checks=ALL_CHECKS)
    body = metrics.render(report).decode()
    return {p: float(v) == 1.0 for p, v in _GATE_METRIC.findall(body)}


def test_every_fixture_is_walked():
    # 93 family fixtures plus the ones added since; a fixture directory without bundle.yaml
    # would silently drop out of the walk below.
    assert len(FIXTURES) >= 94
    assert all((BUNDLES / n / "bundle.yaml").is_file() for n in FIXTURES)


@pytest.mark.parametrize("name", FIXTURES)
def test_each_paths_gate_is_what_that_path_alone_decides(name):
    default = run_cli(["check", "--bundle", str(BUNDLES / name), "--format", "json"]).json()
    jsonschema.validate(default, SCHEMA)  # skip kinds and by_path as documented
    assert set(default["gates"]) == set(PATHS)
    metric = _metric_gates(name)
    assert set(metric) == set(PATHS)
    for path in PATHS:
        alone = _alone(name, path)
        assert default["gates"][path] == alone, (name, path)
        assert metric[path] is alone["open"], (name, path)


def test_the_565_host_is_closed_by_driver_branch_only_where_the_minimum_is_580():
    # policy_v1.yaml: minimum R565 on dra, R580 on operator-gpucluster, R535 elsewhere.
    doc = run_cli(["check", "--bundle", str(BUNDLES / "host-driver-565-open"), "--path", "dra",
                   "--format", "json"]).json()
    assert "driver-branch" not in doc["gates"]["dra"]["blocking"]
    assert "driver-branch" in doc["gates"]["operator-gpucluster"]["blocking"]
    branch = next(c for c in doc["checks"] if c["id"] == "driver-branch")
    # R565 is past NVIDIA's end of life: policy version 2 warns on every path (a warning does
    # not close the dra gate); version 1 passed it on dra.
    assert branch["status"] == "warn"
    assert branch["by_path"]["operator-gpucluster"]["status"] == "fail"
    assert "R580" in branch["by_path"]["operator-gpucluster"]["summary"]
    # device-plugin warns past end of life as dra does (policy version 2's
    # warn_past_end_of_life_paths names every path): the same verdict, so no by_path entry.
    assert "device-plugin" not in branch["by_path"]


def test_the_dra_host_shows_device_plugin_closed_by_the_allocation_owner():
    doc = run_cli(["check", "--bundle", str(BUNDLES / "full-healthy-dra"), "--format",
                   "json"]).json()
    assert doc["gates"]["dra"]["open"] is True
    assert "allocation-owner" in doc["gates"]["device-plugin"]["blocking"]
