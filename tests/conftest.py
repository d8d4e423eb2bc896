"""Shared test helpers: fixture bundle locations and an in-process CLI runner."""
import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any, Dict, List, NamedTuple

import pytest

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
