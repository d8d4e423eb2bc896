"""Shared test helpers: fixture bundle locations and an in-process CLI runner."""
import io
import json
import os
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any, Dict, List, NamedTuple

import pytest
from hypothesis import HealthCheck, settings

# Property tests in CI (which sets CI=true) draw the same cases every run and keep no example
# database, so a red build is reproducible and never flaky; locally the default profile keeps
# exploring new random cases (https://hypothesis.readthedocs.io/en/latest/settings.html,
# "Settings profiles"). Tests with their own @settings keep their example counts. Recent
# Hypothesis loads a built-in "ci" profile like this one whenever CI is in the environment;
# registering it here gives the same behaviour on every version pyproject.toml allows.
settings.register_profile("ci", derandomize=True, deadline=None, database=None,
                          print_blob=True, suppress_health_check=[HealthCheck.too_slow])
if "CI" in os.environ:
    settings.load_profile("ci")

# The simulated libnvidia-ml's fixtures (nvml_sim, nvml_sim_build) for the NVML tests; the
# real-component rules and per-component counts of integration tests (GNA_REQUIRE_COMPONENTS).
pytest_plugins = ["tests.nvml_sim.fixtures", "tests.component_hooks"]

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
BUNDLES = TESTS / "fixtures" / "bundles"


class CliResult(NamedTuple):
    rc: int
    out: str
    err: str

    def json(self) -> Dict[str, Any]:
        return json.loads(self.out)


def run_cli(args: List[str]) -> CliResult:
    """Runs `gpu-node-agent ARGS` in this process (the real entry point, not a re-implementation)."""
    from agent.cli import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main(args)
    return CliResult(rc, out.getvalue(), err.getvalue())


@pytest.fixture
def cli():
    return run_cli


def bundle(name: str) -> str:
    path = BUNDLES / name
    assert path.is_dir(), f"no fixture bundle {name}"
    return str(path)
