"""One check run on a fixture bundle (tests/fixtures/bundles/<name>), for the check tests that
call a check directly: the bundle is loaded, the check run on its host under `policy`, and the
bundle closed whatever the check does (agent/host/bundle.py, LoadedBundle.close)."""
from typing import Any

from agent.host.bundle import load_bundle
from agent.model import Outcome
from checks.policy import ResolvedPolicy
from tests.conftest import bundle


def run_on_bundle(check: Any, name: str, policy: ResolvedPolicy) -> Outcome:
    loaded = load_bundle(bundle(name))
    try:
        return check.run(loaded.host, policy)
    finally:
        loaded.close()
