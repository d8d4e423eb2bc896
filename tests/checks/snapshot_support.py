"""What the GPU checks' direct-call tests share (tests/checks/test_mutants_*gpu*.py and the
like): a check run on a GPU snapshot written by hand in the layout of docs/gpu-snapshot.md,
without a bundle. The bundle-driven GPU tests share tests/checks/gpu_support.py instead."""
import copy
from typing import Any, Mapping, Optional

from agent.config import Config
from agent.host.seam import Host, StaticFacts, StaticGpus
from agent.model import Outcome
from checks.policy import ResolvedPolicy, load_policy


def on_snapshot(check: Any, snap: Mapping[str, Any], facts: Optional[Mapping[str, Any]] = None,
                version: int = 1, overrides: Optional[Mapping[str, Any]] = None,
                **settings: Any) -> Outcome:
    """`check` on a host whose GPU snapshot is `snap` (a deep copy: a test's tables stay as
    written) and whose host facts are `facts`, with nothing on disk under its root, on the dra
    path of policy `version` with `overrides` merged, and the config's settings (agent/config.py
    Config, its defaults where `settings` names nothing)."""
    host = Host("/nonexistent-root", gpus=StaticGpus(copy.deepcopy(dict(snap))),
                facts=StaticFacts(facts or {}))
    pol = ResolvedPolicy(load_policy(version, overrides), "dra",
                         settings=Config(**settings).model_dump())
    return check.run(host, pol)
