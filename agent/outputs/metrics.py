"""Prometheus exposition of a Report: rendered once per Report, served as cached bytes.

Written by hand (text format 0.0.4) rather than through prometheus_client's registry: the
series are a pure function of one Report and one GPU snapshot, so rendering is a single pass
and a scrape only copies bytes (the issue's target: p99 < 5 ms, 2x node_exporter's req/s).
Conventions follow https://prometheus.io/docs/practices/naming/ and node-problem-detector:
one-hot status with every known check present from the start; ``gpu`` (the index) is the only
per-GPU label, the UUID/name/PCI id appear once on ``gpu_node_agent_gpu_info``; no free text
in labels. docs/metrics.md is the hand-written catalogue a test holds this module to.
"""
import math
import platform
from dataclasses import dataclass, field
from typing import Any, Iterable, List, Mapping, Optional, Sequence, Tuple

from agent.model import PATHS, Check, Status
from agent.report import Report

P = "gpu_node_agent_"
STATUSES: Tuple[str, ...] = tuple(s.value for s in Status)
# Clock-event reasons that mean the GPU is being slowed by a fault or by heat (nvml.h
# "Clocks Event Reasons"); idle/app-clock/sync-boost reasons are normal and not exported.
CLOCK_EVENTS: Tuple[str, ...] = (
    "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown",
)
Labels = Tuple[Tuple[str, str], ...]


@dataclass
class MetricsInput:
    checks: Sequence[Check]  # every known check: each has status series from the start
    version: str
    path: str
    report: Optional[Report] = None
    last_run: Mapping[str, float] = field(default_factory=dict)  # check id -> unix time
    gpus: Optional[Mapping[str, Any]] = None  # the GPU snapshot (docs/gpu-snapshot.md)
    nvml_stats: Mapping[str, int] = field(default_factory=dict)
    # The XID monitor's hook: (gpu index, XID code) -> count of events since boot. Exported as a
    # counter: it only grows within a boot, and a reboot resets it like a restart would.
    xid_counts: Mapping[Tuple[str, str], int] = field(default_factory=dict)
    last_success: Optional[float] = None  # unix time the last full cycle completed
    cycle_duration: Optional[float] = None
    config_reload_ok: bool = True
    start_time: float = 0.0


class _Out:
    def __init__(self) -> None:
        self.lines: List[str] = []

    def family(self, name: str, mtype: str, help_text: str,
               samples: Iterable[Tuple[Labels, Optional[float]]]) -> None:
        rows = [(labels, v) for labels, v in samples if v is not None]
        if not rows:
            return  # an info series with nothing known is left out, not emitted empty
        full = P + name
        self.lines.append(f"# HELP {full} {_help(help_text)}")
        self.lines.append(f"# TYPE {full} {mtype}")
        for labels, value in rows:
            label_text = ",".join(f'{k}="{_label(v)}"' for k, v in labels)
            series = f"{full}{{{label_text}}}" if labels else full
            self.lines.append(f"{series} {_num(value)}")


def _help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _num(value: Optional[float]) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "NaN"
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float) and math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"  # the text format's spelling
    if isinstance(value, int) or float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def _f(value: Any) -> Optional[float]:
    """A number from the snapshot, or None (not reported by NVML for this GPU, or not a
    number a float can hold: the snapshot is input and JSON integers have no bound)."""
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)):
        try:
            return float(value)
        except OverflowError:
            return None
    return None


def _gpu_index(gpu: Any) -> Optional[int]:
    """The NVML index (an unsigned int, nvml.h) of a snapshot GPU entry; None = not one."""
    if not isinstance(gpu, Mapping):
        return None
    index = gpu.get("index")
    if isinstance(index, int) and not isinstance(index, bool) and 0 <= index < 2**32:
        return index
    return None


def _text(value: Any) -> str:
    """A label value from the snapshot: text only (never str() of a list or object)."""
    return value if isinstance(value, str) else ""


def _dig(data: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(data, Mapping):
            return None
        data = data.get(key)
    return data


def render(inp: MetricsInput) -> bytes:
    out = _Out()
    report = inp.report
    results = {r.id: r for r in report.results} if report else {}
    _agent(out, inp, report)
    _checks(out, inp, results)
    out.family("gate_open", "gauge", "1 when the allocation path's gate is open.", (
        ((("path", p),), float(report.gates[p].open) if report else 0.0) for p in PATHS))
    out.family("allocation_path_info", "gauge", "The configured allocation path.",
               [((("path", inp.path),), 1.0)])
    _time_sync(out, results.get("time-sync"))
    _software(out, inp, results)
    _gpus(out, inp)
    # "replace": a lone surrogate (JSON "\ud800" in a snapshot string) has no UTF-8 form.
    return ("\n".join(out.lines) + "\n").encode("utf-8", "replace")


def _agent(out: _Out, inp: MetricsInput, report: Optional[Report]) -> None:
    out.family("build_info", "gauge", "The agent's version and Python; always 1.", [(
        (("version", inp.version), ("python_version", platform.python_version())), 1.0)])
    out.family("start_time_seconds", "gauge", "Unix time the agent started.",
               [((), inp.start_time)])
    out.family("last_success_timestamp_seconds", "gauge",
               "Unix time the last check cycle completed (0 before the first).",
               [((), inp.last_success or 0.0)])
    out.family("cycle_duration_seconds", "gauge", "Wall time of the last check cycle.",
               [((), inp.cycle_duration if inp.cycle_duration is not None else 0.0)])
    out.family("config_last_reload_successful", "gauge",
               "1 when the last configuration (re)load succeeded.",
               [((), 1.0 if inp.config_reload_ok else 0.0)])


def _checks(out: _Out, inp: MetricsInput, results: Mapping[str, Any]) -> None:
    def status_rows() -> Iterable[Tuple[Labels, Optional[float]]]:
        for check in inp.checks:
            r = results.get(check.id)
            # Before its first run a check is unknown: "present from the start" (NPD style).
            current = str(r.status) if r is not None else "unknown"
            for status in STATUSES:
                yield (("check", check.id), ("status", status)), float(status == current)

    out.family("check_status", "gauge",
               "One-hot status of each check (pass, warn, fail, unknown, skip).", status_rows())
    out.family("check_info", "gauge", "Static metadata of each check; always 1.", (
        ((("check", c.id), ("severity", str(c.severity)), ("interval", str(c.interval))), 1.0)
        for c in inp.checks))
    out.family("check_duration_seconds", "gauge", "Wall time of the check's last run.", (
        ((("check", c.id),), results[c.id].duration_s if c.id in results else 0.0)
        for c in inp.checks))
    out.family("check_last_run_timestamp_seconds", "gauge",
               "Unix time the check last ran (0 before its first run).", (
                   ((("check", c.id),), inp.last_run.get(c.id, 0.0)) for c in inp.checks))


def _time_sync(out: _Out, result: Any) -> None:
    """From the time-sync check's details (checks/time_sync.py). Unknown = NaN, so an alert
    on the offset never fires on missing data; ``time_synced`` follows the check's verdict
    when the details do not say."""
    details = result.details if result is not None else {}
    offset = _f(details.get("offset_s"))
    synced = details.get("synced")
    if not isinstance(synced, bool):
        synced = None if result is None or result.status in ("unknown", "skip") else (
            result.status in ("pass", "warn"))
    out.family("time_offset_seconds", "gauge",
               "Clock offset from the time source the sync daemon reports (NaN when unknown).",
               [((), offset if offset is not None else math.nan)])
    out.family("time_synced", "gauge",
               "1 when the clock is synchronised, 0 when not, NaN when unknown.",
               [((), _f(synced) if synced is not None else math.nan)])


def _software(out: _Out, inp: MetricsInput, results: Mapping[str, Any]) -> None:
    driver = _dig(inp.gpus, "driver_version")
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


def _gpus(out: _Out, inp: MetricsInput) -> None:
    snap = inp.gpus
    err = _dig(snap, "error")
    out.family("nvml_up", "gauge", "1 when the last GPU snapshot came from NVML without error.",
               [((), 1.0 if snap is not None and not err else 0.0)])
    stats = inp.nvml_stats
    out.family("nvml_timeouts_total", "counter", "NVML requests that passed their deadline.",
               [((), float(stats.get("timeouts", 0)))])
    out.family("nvml_worker_respawns_total", "counter", "NVML worker processes respawned.",
               [((), float(stats.get("respawns", 0)))])
    out.family("nvml_stuck_workers", "gauge",
               "NVML workers that survived SIGKILL (blocked in the driver).",
               [((), float(stats.get("stuck_workers", 0)))])
    listed = _dig(snap, "gpus")
    gpus: List[Mapping[str, Any]] = [
        g for g in (listed if isinstance(listed, list) else []) if _gpu_index(g) is not None
    ]
    if snap is not None and not err:
        out.family("gpus", "gauge", "GPUs NVML reports.", [((), float(len(gpus)))])
    idx = [(g, (("gpu", str(_gpu_index(g))),)) for g in gpus]

    def per(name: str, mtype: str, help_text: str, fn: Any) -> None:
        out.family(name, mtype, help_text, ((lab, fn(g)) for g, lab in idx))

    out.family("gpu_info", "gauge", "Identity of each GPU; always 1.", (
        (lab + (("uuid", _text(g.get("uuid"))), ("name", _text(g.get("name"))),
                ("pci_bus_id", _text(g.get("pci_bus_id")))), 1.0) for g, lab in idx))
    per("gpu_responding", "gauge", "1 when NVML answered for the GPU without a GPU-level error.",
        lambda g: 0.0 if g.get("error") else 1.0)
    per("gpu_memory_total_bytes", "gauge", "Total framebuffer memory.",
        lambda g: _f(_dig(g, "memory", "total_bytes")))
    per("gpu_memory_used_bytes", "gauge", "Used framebuffer memory.",
        lambda g: _f(_dig(g, "memory", "used_bytes")))
    per("gpu_temperature_celsius", "gauge", "GPU core temperature.",
        lambda g: _f(_dig(g, "temperature", "gpu_c")))
    per("gpu_slowdown_temperature_celsius", "gauge", "Temperature at which the GPU slows down.",
        lambda g: _f(_dig(g, "temperature", "slowdown_c")))
    per("gpu_shutdown_temperature_celsius", "gauge", "Temperature at which the GPU shuts down.",
        lambda g: _f(_dig(g, "temperature", "shutdown_c")))
    out.family("gpu_ecc_errors_total", "counter",
               "ECC errors by type and NVML counter (volatile resets at driver load).", (
                   (lab + (("type", t), ("counter", c)), _f(_dig(g, "ecc", c, t)))
                   for g, lab in idx for c in ("volatile", "aggregate")
                   for t in ("corrected", "uncorrected")))
    out.family("gpu_remapped_rows", "gauge", "Rows remapped, by the kind of error behind it.", (
        (lab + (("cause", cause),), _f(_dig(g, "remapped_rows", cause)))
        for g, lab in idx for cause in ("correctable", "uncorrectable")))
    per("gpu_remap_pending", "gauge", "1 when a row remap waits for a GPU reset.",
        lambda g: _f(_dig(g, "remapped_rows", "pending")))
    per("gpu_remap_failed", "gauge", "1 when a row remap failed (the GPU needs service).",
        lambda g: _f(_dig(g, "remapped_rows", "failure")))
    out.family("gpu_clock_event_active", "gauge", "1 while a slowdown reason is active.", (
        (lab + (("reason", reason),), _clock_event(g, reason))
        for g, lab in idx for reason in CLOCK_EVENTS))
    per("gpu_pcie_link_width", "gauge", "Current PCIe link width (lanes).",
        lambda g: _f(_dig(g, "pcie", "width_current")))
    per("gpu_pcie_link_width_max", "gauge", "Maximum PCIe link width (lanes).",
        lambda g: _f(_dig(g, "pcie", "width_max")))
    per("gpu_pcie_link_generation", "gauge", "Current PCIe link generation.",
        lambda g: _f(_dig(g, "pcie", "gen_current")))
    per("gpu_nvlink_links", "gauge", "NVLinks the GPU has (0 without NVLink).",
        lambda g: _nvlinks(g, False))
    per("gpu_nvlink_links_active", "gauge", "NVLinks that are active.",
        lambda g: _nvlinks(g, True))
    per("gpu_persistence_mode_enabled", "gauge", "1 when persistence mode is on.",
        lambda g: _f(g.get("persistence_mode")))
    out.family("gpu_mig_mode_enabled", "gauge", "1 when MIG mode is enabled (current, pending).", (
        (lab + (("state", state),), _mig(g, state)) for g, lab in idx
        for state in ("current", "pending")))
    out.family("gpu_xid_errors_total", "counter",
               "XID errors since boot by GPU index and XID code (kernel log and NVML events).", (
                   ((("gpu", _key_text(gpu)), ("xid", _key_text(code))), _f(n))
                   for (gpu, code), n in sorted(inp.xid_counts.items(), key=_xid_key)))


def _clock_event(g: Mapping[str, Any], reason: str) -> Optional[float]:
    active = _dig(g, "clock_event_reasons", "active")
    return float(reason in active) if isinstance(active, list) else None


def _nvlinks(g: Mapping[str, Any], active_only: bool) -> Optional[float]:
    links = _dig(g, "nvlink", "links")
    if not isinstance(links, list):
        return None
    return float(sum(1 for link in links if not active_only or _dig(link, "active") is True))


def _mig(g: Mapping[str, Any], state: str) -> Optional[float]:
    value = _dig(g, "mig", state)
    return float(value == "enabled") if isinstance(value, str) else None


def _key_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, int) and abs(value) < 2**64:
        return str(value)
    return ""


def _numeric(text: str) -> int:
    """Sort key: numbers in numeric order ("7" < "12"); anything that is not a short ASCII
    number sorts as 0, then by text. isdigit() alone would accept "²", which int() refuses."""
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 18 else 0


def _xid_key(item: Tuple[Tuple[str, str], int]) -> Tuple[Any, ...]:
    (gpu, code), _ = item
    g, c = _key_text(gpu), _key_text(code)
    return (_numeric(g), g, _numeric(c), c)


def write_textfile(directory: str, body: bytes, name: str = "gpu_node_agent.prom") -> str:
    """node_exporter's textfile collector: write to a temp file in the same directory and
    rename, so the collector never reads a half-written file (its docs say exactly this).
    The exposition carries no timestamps (the collector rejects them)."""
    import os

    from agent.safeio.atomic import write_atomic

    return write_atomic(os.path.join(directory, name), body, prefix=".gpu_node_agent.")
