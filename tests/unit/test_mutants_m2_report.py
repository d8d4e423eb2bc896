"""The Report before `run`'s first cycle (agent/report.py pending_report), as its docstring
states it: no results, no gate open (``gates`` empty, ``gate`` closed with nothing blocking),
and the fields beyond the verdicts carried through as read-only copies. Only the daemon made
one, and the daemon's tests are not among those the mutation tier judges mutants by
(tests/mutation/tier.py), so every mutant of it survived there."""
from types import MappingProxyType

import pytest

from agent.model import Check, Interval, Severity, passed
from agent.report import Gate, KnownCheck, RunFacts, pending_report


def _check(cid: str, severity: Severity, interval: Interval) -> Check:
    return Check(id=cid, title=cid, severity=severity, gates=("dra",), interval=interval,
                 remediation="fix it", run=lambda h, p: passed("ok"))


def test_nothing_checked_means_no_gate_open() -> None:
    rep = pending_report("device-plugin", "node-7", "1.2.3")
    assert rep.path == "device-plugin"
    assert rep.strict is False
    assert rep.results == ()
    assert rep.gate == Gate("device-plugin", False, ())
    assert dict(rep.gates) == {}
    assert rep.host == "node-7"
    assert rep.generated_at == 0.0
    assert rep.agent_version == "1.2.3"
    assert rep.policy_version is None


def test_the_extras_are_carried_as_read_only_copies() -> None:
    checks = [_check("driver-branch", Severity.CRITICAL, Interval.SLOW),
              _check("gpu-xid", Severity.WARNING, Interval.FAST)]
    gpus = {"gpus": [{"uuid": "GPU-1"}]}
    stats = {"timeouts": 2}
    xids = {("0", "79"): 1}
    run = RunFacts(last_success=5.0, start_time=1.0)
    rep = pending_report("dra", "h", "v", checks, gpus, stats, xids, run)
    assert rep.checks == (KnownCheck("driver-branch", Severity.CRITICAL, Interval.SLOW),
                          KnownCheck("gpu-xid", Severity.WARNING, Interval.FAST))
    assert dict(rep.gpus or {}) == gpus and isinstance(rep.gpus, MappingProxyType)
    assert dict(rep.nvml_stats) == stats and dict(rep.xid_counts) == xids
    assert rep.run is run
    gpus["gpus"] = []
    stats["timeouts"] = 9
    assert dict(rep.nvml_stats) == {"timeouts": 2}  # a copy: the caller's dict moves on
    assert rep.gpus is not None and rep.gpus["gpus"] == [{"uuid": "GPU-1"}]
    with pytest.raises(TypeError):
        rep.nvml_stats["timeouts"] = 0  # type: ignore[index]


def test_without_extras_the_defaults() -> None:
    rep = pending_report("dra", "h", "v")
    assert rep.checks == () and rep.gpus is None
    assert dict(rep.nvml_stats) == {} and dict(rep.xid_counts) == {}
    assert rep.run == RunFacts()
