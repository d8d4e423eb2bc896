"""Real components cannot vanish in CI (a pytest plugin, registered in tests/conftest.py, so it
sees every test marked `integration`, wherever it lives).

With GNA_REQUIRE_COMPONENTS=1 (scripts/test-all sets it for the integration step) every skip of
an integration test, at run time or of a module of tests/integration at import, becomes a
failure, except the few in ENVIRONMENT_SKIPS that describe the kernel or the hardware rather
than a missing component. The run ends with the number of tests run per component
(tests/components.py records which component each test used; MODULE_COMPONENTS names what a
whole module drives); GNA_EXPECT_COMPONENTS (space-separated labels) fails the run when one of
them had no test run at all.
"""
import os
from collections import Counter
from pathlib import Path
from typing import Dict, List, Set

import pytest

from tests.components import USED, required

# Skips that stay skips under GNA_REQUIRE_COMPONENTS=1: the machine cannot show the case at all
# (a kernel feature, a real GPU driver), whatever the setup installed.
ENVIRONMENT_SKIPS = (
    "PR_SET_MDWE needs Linux 6.3+",  # prctl(PR_SET_MDWE) is new in Linux 6.3
    "this machine has a real libnvidia-ml",  # the no-driver case needs a host without one
)

# The component(s) every test of a module drives, beside those it records itself through
# tests/components.py (the containerd series, chronyd, prometheus, ...).
MODULE_COMPONENTS: Dict[str, List[str]] = {
    "test_ansible_role.py": ["ansible"],
    "test_kube_cli.py": ["kube-api-double"],
    "test_kube_daemon.py": ["kube-api-double"],
    "test_nvml_collect.py": ["nvml-sim"],
    "test_nvml_mig.py": ["nvml-sim"],
    "test_nvml_scenarios.py": ["nvml-sim"],
    "test_nvml_sku.py": ["nvml-sim"],
    "test_nvml_umockdev.py": ["nvml-sim"],
    "test_nvml_worker.py": ["nvml-sim"],
    "test_xid_nvml_events.py": ["nvml-sim"],
    "test_packages.py": ["packaging"],
    "test_prometheus_scrape.py": ["prometheus"],
    "test_run_daemon.py": ["agent-process"],
    "test_run_process.py": ["agent-process"],
    "test_systemd_unit.py": ["systemd-analyze"],
    "test_xid_journal.py": ["journal-remote"],
    "test_xid_restart.py": ["agent-process"],
    "test_gpus_json_drift.py": ["nvml-sim"],  # tests/
    "test_fixture_families_drift.py": ["nvml-sim"],  # tests/
    "test_nvml_faults.py": ["nvml-sim"],  # tests/reliability/
}

_outcomes: Dict[str, str] = {}  # node id -> passed / failed / skipped
_labels: Dict[str, Set[str]] = {}  # node id -> module components
_collect_failed: List[str] = []


def _skip_reason(rep) -> str:
    longrepr = rep.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


def _allowed(reason: str) -> bool:
    return any(text in reason for text in ENVIRONMENT_SKIPS)


def pytest_collectreport(report):
    # A module skipped at import (pytest.importorskip, allow_module_level) stays reported as
    # skipped, so the other modules still run; the session fails at the end (sessionfinish).
    if (required() and report.skipped and report.nodeid.endswith(".py")
            and report.nodeid.startswith("tests/integration/")
            and not _allowed(_skip_reason(report))):
        _collect_failed.append(f"{report.nodeid}: {_skip_reason(report)}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if "integration" not in item.keywords:
        return
    _labels.setdefault(item.nodeid, set()).update(
        MODULE_COMPONENTS.get(Path(str(item.path)).name, []))
    if required() and rep.skipped and not hasattr(rep, "wasxfail"):
        reason = _skip_reason(rep)
        if not _allowed(reason):
            rep.outcome = "failed"
            rep.longrepr = (f"skipped under GNA_REQUIRE_COMPONENTS=1 (a real-component test "
                            f"must run in CI): {reason}")
    previous = _outcomes.get(item.nodeid)
    if rep.failed or previous == "failed":
        _outcomes[item.nodeid] = "failed"
    elif rep.skipped:
        _outcomes[item.nodeid] = "skipped"
    elif rep.when == "call":
        _outcomes[item.nodeid] = "passed"


def _per_component() -> Dict[str, Counter]:
    table: Dict[str, Counter] = {}
    for nodeid, outcome in _outcomes.items():
        labels = set(_labels.get(nodeid, ()))
        labels.update(label for label, tests in USED.items() if nodeid in tests)
        for label in labels or {"(none)"}:
            table.setdefault(label, Counter())[outcome] += 1
    return table


def _expected_but_not_run() -> List[str]:
    table = _per_component()
    expected = os.environ.get("GNA_EXPECT_COMPONENTS", "").split()
    return [label for label in expected
            if table.get(label, Counter())["passed"] + table.get(label, Counter())["failed"] == 0]


def pytest_terminal_summary(terminalreporter):
    table = _per_component()
    missed = _expected_but_not_run()
    if not (table or missed or _collect_failed):
        return
    mode = "required" if required() else "optional (skips allowed)"
    terminalreporter.section(f"tests per component, components {mode}")
    for label in sorted(table):
        counts = table[label]
        ran = counts["passed"] + counts["failed"]
        terminalreporter.write_line(
            f"component {label}: {ran} run ({counts['passed']} passed, {counts['failed']} failed),"
            f" {counts['skipped']} skipped")
    for label in missed:
        terminalreporter.write_line(f"component {label}: expected (GNA_EXPECT_COMPONENTS) "
                                    f"but no test ran: failing")
    for entry in _collect_failed:
        terminalreporter.write_line(f"module {entry}: skipped at import under "
                                    f"GNA_REQUIRE_COMPONENTS=1: failing")


def pytest_sessionfinish(session):
    # 5 is "no tests collected": a run whose only module was skipped at import ends there.
    if session.exitstatus in (0, 5) and (_expected_but_not_run() or _collect_failed):
        session.exitstatus = 1
