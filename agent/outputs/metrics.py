"""Prometheus exposition of a Report: rendered once per Report, served as cached bytes.

Written by hand (text format 0.0.4) rather than through prometheus_client's registry: the
series are a pure function of one Report (which carries the GPU snapshot, the NVML counters and
the XID counts: agent/report.py), so rendering is a single pass and a scrape only copies
bytes (bench/bench_scrape.py: p99 < 5 ms, 2x node_exporter's req/s).
Conventions follow https://prometheus.io/docs/practices/naming/ and node-problem-detector:
one-hot status with every known check present from the start; ``gpu`` (the index) is the only
per-GPU label, the UUID/name/PCI id appear once on ``gpu_node_agent_gpu_info``; no free text
in labels. docs/metrics.md is the hand-written catalogue a test holds this module to. The
per-GPU series are in agent/outputs/metrics_gpu.py; the text format in exposition.py.

The default exposition is what a health alert needs, so a host's series stay few (each check
adds its five one-hot status series, which carry its ``severity`` for the alerts' routing;
docs/metrics.md "Cardinality"). Per-check metadata and timings (``run.check_details``) and the
per-GPU telemetry dcgm-exporter already exports (``run.gpu_telemetry``) are options.
"""
import math
import platform
from typing import Any, Callable, Iterable, Mapping, Optional, Tuple

from agent.model import PATHS, Status
from agent.outputs.exposition import Labels, Writer, as_float, dig
from agent.outputs.metrics_gpu import gpu_families
from agent.outputs.metrics_gpu_health import gpu_health_families
from agent.outputs.metrics_node import node_families
from agent.report import Report

STATUSES: Tuple[str, ...] = tuple(s.value for s in Status)


def render(report: Report, gpu_telemetry: bool = False, check_details: bool = False) -> bytes:
    """The exposition of ``report``: every known check (``report.checks``), the gates, the
    run's timestamps (``report.run``), the GPU snapshot, NVML counters and XID counts; with
    ``check_details`` each check's info, duration and last run, with ``gpu_telemetry`` the
    per-GPU telemetry (agent/outputs/metrics_gpu.py)."""
    out = Writer()
    results = {r.id: r for r in report.results}
    _agent(out, report)
    _checks(out, report, results, check_details)
    # A path absent from ``gates`` has not been evaluated (agent/report.py pending_report):
    # not open.
    out.family("gate_open", "gauge", "1 when the allocation path's gate is open.", (
        ((("path", p),), float(report.gates[p].open) if p in report.gates else 0.0)
        for p in PATHS))
    out.family("allocation_path_info", "gauge", "The configured allocation path.",
               [((("path", report.path),), 1.0)])
    # The checks closing the configured path's gate, exactly as evaluate_gate decided (which
    # checks gate which path is not in the series otherwise); none while it is open.
    out.family("gate_blocking", "gauge", "1 for each check that closes the configured path's gate.",
               [((("path", report.path), ("check", c)), 1.0) for c in report.gate.blocking])
    _time_sync(out, results.get("time-sync"))
    _software(out, report, results)
    gpu_families(out, report, gpu_telemetry)
    gpu_health_families(out, report)
    node_families(out, report)
    return out.body()


def renderer(settings: Callable[[], Any]) -> Callable[[Report], bytes]:
    """``render`` with the options of the `run:` settings ``settings()`` returns at each call
    (agent/config_sections.py RunConfig), so a SIGHUP reload applies to the next Report."""

    def _render(report: Report) -> bytes:
        run = settings()  # getattr: a settings object from before these options renders the default
        return render(report, gpu_telemetry=bool(getattr(run, "gpu_telemetry", False)),
                      check_details=bool(getattr(run, "check_details", False)))

    return _render


class Rendered:
    """The exposition of the latest Report, rendered once however many outputs ask (the
    endpoint and the textfile serve the same bytes). Reports are immutable, so the last one
    rendered is known by identity."""

    def __init__(self, renderer: Callable[[Report], bytes] = render) -> None:
        self._renderer = renderer
        self._last: Optional[Tuple[Report, bytes]] = None

    def __call__(self, report: Report) -> bytes:
        last = self._last
        if last is not None and last[0] is report:
            return last[1]
        body = self._renderer(report)
        self._last = (report, body)
        return body


def _agent(out: Writer, report: Report) -> None:
    run = report.run
    out.family("build_info", "gauge", "The agent's version and Python; always 1.", [(
        (("version", report.agent_version), ("python_version", platform.python_version())), 1.0)])
    out.family("start_time_seconds", "gauge", "Unix time the agent started.",
               [((), run.start_time)])
    out.family("last_success_timestamp_seconds", "gauge",
               "Unix time the last check cycle completed (0 before the first).",
               [((), run.last_success or 0.0)])
    out.family("cycle_duration_seconds", "gauge", "Wall time of the last check cycle.",
               [((), run.cycle_duration if run.cycle_duration is not None else 0.0)])
    out.family("config_last_reload_successful", "gauge",
               "1 when the last configuration (re)load succeeded.",
               [((), 1.0 if run.config_reload_ok else 0.0)])


def _checks(out: Writer, report: Report, results: Mapping[str, Any], details: bool) -> None:
    known = report.checks
    def status_rows() -> Iterable[Tuple[Labels, Optional[float]]]:
        for check in known:
            r = results.get(check.id)
            # Before its first run a check is unknown: "present from the start" (NPD style).
            current = str(r.status) if r is not None else "unknown"
            # The severity rides on the status (static per check: no extra series), so an
            # alert routes on it without joining check_info (an option since it costs a
            # series per check).
            severity = ("severity", str(check.severity))
            for status in STATUSES:
                yield (("check", check.id), ("status", status), severity), float(status == current)

    out.family("check_status", "gauge",
               "One-hot status of each check (pass, warn, fail, unknown, skip).", status_rows())
    if not details:
        return
    out.family("check_info", "gauge", "Static metadata of each check; always 1.", (
        ((("check", c.id), ("severity", str(c.severity)), ("interval", str(c.interval))), 1.0)
        for c in known))
    out.family("check_duration_seconds", "gauge", "Wall time of the check's last run.", (
        ((("check", c.id),), results[c.id].duration_s if c.id in results else 0.0)
        for c in known))
    out.family("check_last_run_timestamp_seconds", "gauge",
               "Unix time the check last ran (0 before its first run).", (
                   ((("check", c.id),), report.run.last_run.get(c.id, 0.0)) for c in known))


def _time_sync(out: Writer, result: Any) -> None:
    """From the time-sync check's details (checks/time/time_sync.py). Unknown = NaN, so an alert
    on the offset never fires on missing data; ``time_synced`` follows the check's verdict
    when the details do not say."""
    details = result.details if result is not None else {}
    offset = as_float(details.get("offset_s"))
    synced = details.get("synced")
    if not isinstance(synced, bool):
        synced = None if result is None or result.status in ("unknown", "skip") else (
            result.status in ("pass", "warn"))
    out.family("time_offset_seconds", "gauge",
               "Clock offset from the time source the sync daemon reports (NaN when unknown).",
               [((), offset if offset is not None else math.nan)])
    out.family("time_synced", "gauge",
               "1 when the clock is synchronised, 0 when not, NaN when unknown.",
               [((), as_float(synced) if synced is not None else math.nan)])


def _software(out: Writer, report: Report, results: Mapping[str, Any]) -> None:
    driver = dig(report.gpus, "driver_version")
    if not isinstance(driver, str) and "driver-branch" in results:
        driver = results["driver-branch"].details.get("version")
    if isinstance(driver, str):
        out.family("driver_info", "gauge", "The NVIDIA driver version; always 1.",
                   [((("version", driver),), 1.0)])
    tk = results.get("toolkit-version")
    toolkit = tk.details.get("version") if tk is not None else None
    if isinstance(toolkit, str):
        out.family("toolkit_info", "gauge", "The NVIDIA Container Toolkit version; always 1.",
                   [((("version", toolkit),), 1.0)])


class MetricsEndpoint:
    """The metrics endpoint (agent/outputs/metrics_server.py) as an Output: each Report's
    exposition becomes the bytes every scrape is served until the next one."""

    def __init__(self, server: Any, render: Any = render) -> None:
        self.server = server
        self._render = render

    def publish(self, report: Report) -> bytes:
        body: bytes = self._render(report)
        self.server.publish(body)
        return body

    def close(self) -> None:
        self.server.stop()
