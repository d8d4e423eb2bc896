"""pytest fixtures for the simulated libnvidia-ml (import them into a test module).

``nvml_sim_build`` compiles the library once per session into a temp dir (skipping, with
the reason printed, only when gcc or nvml.h cannot be had; CI installs both).
``nvml_sim`` gives a test its own scenario file, symbol log and call log.
"""
import contextlib
import os
import signal
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

from agent.nvml.client import NvmlClient, NvmlGpuSource
from tests.nvml_sim import simlib


@pytest.fixture(scope="session")
def nvml_sim_build(tmp_path_factory: Any) -> Dict[str, Path]:
    try:
        return simlib.build(tmp_path_factory.mktemp("nvml-sim"))
    except simlib.SimUnavailable as exc:
        pytest.skip(f"simulated libnvidia-ml cannot be built: {exc}")


class Sim:
    def __init__(self, built: Dict[str, Path], tmp: Path) -> None:
        self.built = built
        self.scenario_path = tmp / "scenario.json"
        self.symbol_log = tmp / "missing-symbols.log"
        self.call_log = tmp / "calls.log"
        self.doc: Dict[str, Any] = {}
        self.clients: List[NvmlClient] = []

    def use(self, scenario: Any) -> Dict[str, Any]:
        """Switch to a scenario (file name under scenarios/, or a document); returns the
        flat document the library reads."""
        self.doc = simlib.resolve(scenario)
        simlib.write_scenario(self.doc, self.scenario_path)
        return self.doc

    def env(self, library: bool = True, call_log: bool = False) -> Dict[str, str]:
        return simlib.worker_env(
            self.built if library else None, self.scenario_path, self.symbol_log,
            self.call_log if call_log else None)

    def client(self, library: bool = True, **kwargs: Any) -> NvmlClient:
        kwargs.setdefault("first_deadline_s", 20.0)
        client = NvmlClient(env=self.env(library), **kwargs)
        self.clients.append(client)
        return client

    def source(self, library: bool = True, **kwargs: Any) -> NvmlGpuSource:
        kwargs.setdefault("first_deadline_s", 20.0)
        return NvmlGpuSource(env=self.env(library), **kwargs)

    def missing_symbols(self) -> List[str]:
        if not self.symbol_log.exists():
            return []
        return [line for line in self.symbol_log.read_text().splitlines() if line]

    def calls(self) -> List[str]:
        return self.call_log.read_text().splitlines() if self.call_log.exists() else []


@pytest.fixture
def nvml_sim(nvml_sim_build: Dict[str, Path], tmp_path: Path) -> Any:
    sim = Sim(nvml_sim_build, tmp_path)
    yield sim
    for client in sim.clients:
        client.close()
        # A test that left a stuck worker behind must not leak it past the test.
        for pid in (client.worker_pid, client.stuck_pid):
            if pid:
                _kill(pid)


def _kill(pid: Optional[int]) -> None:
    if pid:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def nvml_env_vars(sim: Sim, library: bool = True) -> Dict[str, str]:
    """The variables to set in this process so that a worker the CLI starts loads the
    simulated library (the worker inherits the environment)."""
    env = sim.env(library)
    keys = ("LD_LIBRARY_PATH", "LD_PRELOAD", "NVML_SIM_SCENARIO", "NVML_SIM_SYMBOL_LOG")
    return {k: env[k] for k in keys if k in env}
