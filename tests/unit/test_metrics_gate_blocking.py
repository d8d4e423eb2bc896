"""gpu_node_agent_gate_blocking{path, check}: the checks that close the configured path's gate
(agent/report.py evaluate_gate), which the dashboards' "blocking check" panels read."""
from prometheus_client.parser import text_string_to_metric_families

from agent.engine import Engine
from agent.model import Check, Interval, Severity, failed, passed
from agent.outputs import metrics
from agent.report import build_report
from tests.unit.metrics_fixtures import CHECKS, report


def _blocking(body: bytes):
    return sorted(tuple(sorted(s.labels.items()))
                  for fam in text_string_to_metric_families(body.decode()) for s in fam.samples
                  if s.name == "gpu_node_agent_gate_blocking" and s.value == 1)


def test_the_checks_closing_the_configured_gate():
    # metrics_fixtures: gpu-xid fails and nvml-responsive is unknown (both critical, gating
    # dra); time-sync only warns and toolkit-version is a warning check: neither closes it.
    assert _blocking(metrics.render(report())) == [
        (("check", "gpu-xid"), ("path", "dra")),
        (("check", "nvml-responsive"), ("path", "dra")),
    ]


def _one(cid, outcome, gates, severity=Severity.CRITICAL):
    return Check(id=cid, title=cid, severity=severity, gates=gates, interval=Interval.FAST,
                 remediation="fix it", run=lambda h, p: outcome)


def test_a_check_that_does_not_gate_the_path_is_not_blocking_and_open_means_none():
    checks = [
        _one("containerd-nvidia-runtime", failed("no runtime"), ("device-plugin",)),
        _one("gpu-thermal", failed("hot"), ("dra",), Severity.WARNING),
        _one("driver-loaded", passed("ok"), ("dra", "device-plugin")),
    ]
    results = Engine(checks).run(None, None)
    dra = build_report(results, "dra", False, "h", 1700000000.0, "1.2.3")
    assert dra.gate.open
    body = metrics.render(dra)
    assert _blocking(body) == []
    assert b"gpu_node_agent_gate_blocking" not in body  # no family at all while open
    plugin = build_report(results, "device-plugin", False, "h", 1700000000.0, "1.2.3")
    assert _blocking(metrics.render(plugin)) == [
        (("check", "containerd-nvidia-runtime"), ("path", "device-plugin"))]


def test_strict_counts_warnings():
    results = Engine(CHECKS).run(None, None)
    strict = build_report(results, "dra", True, "h", 1700000000.0, "1.2.3")
    # with --strict the warning time-sync closes the gate too (agent/report.py CLOSING_STRICT)
    assert _blocking(metrics.render(strict)) == [
        (("check", "gpu-xid"), ("path", "dra")),
        (("check", "nvml-responsive"), ("path", "dra")),
        (("check", "time-sync"), ("path", "dra")),
    ]
