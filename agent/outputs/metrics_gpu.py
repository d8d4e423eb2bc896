"""The per-GPU series of the exposition, from the Report's GPU snapshot (docs/gpu-snapshot.md),
the NVML worker's counters and the XID counts. ``gpu`` (the NVML index) is the only per-GPU
label; the UUID, name and PCI id appear once, on ``gpu_node_agent_gpu_info``
(https://prometheus.io/docs/practices/naming/: no identity repeated on every series).

By default only what a health alert reads (prometheus/alerts.yml): identity, whether NVML
answers, uncorrected ECC, row-remap pending/failed, XIDs. The rest is telemetry, exported only
with ``run.gpu_telemetry``: framebuffer used/free, GPU temperature and the remapped-row counts
are in dcgm-exporter's etc/default-counters.csv (DCGM_FI_DEV_FB_USED/FB_FREE, GPU_TEMP,
CORRECTABLE/UNCORRECTABLE_REMAPPED_ROWS), and the others (thresholds, corrected ECC, clock
events, PCIe, NVLink, persistence and MIG mode) are state no alert reads.
"""
from typing import Any, List, Mapping, Optional, Sequence, Tuple

from agent.outputs.exposition import Labels, Writer, as_float, dig
from agent.report import Report

# Clock-event reasons that mean the GPU is being slowed by a fault or by heat (nvml.h
# "Clocks Event Reasons"); idle/app-clock/sync-boost reasons are normal and not exported.
CLOCK_EVENTS: Tuple[str, ...] = (
    "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown",
)


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


def gpu_families(out: Writer, report: Report, telemetry: bool = False) -> None:
    """The NVML series: the worker's health, then one set per GPU in the snapshot (the
    telemetry only with ``telemetry``), then the XID counters."""
    snap = report.gpus
    err = dig(snap, "error")
    out.family("nvml_up", "gauge", "1 when the last GPU snapshot came from NVML without error.",
               [((), 1.0 if snap is not None and not err else 0.0)])
    stats = report.nvml_stats
    out.family("nvml_timeouts_total", "counter", "NVML requests that passed their deadline.",
               [((), float(stats.get("timeouts", 0)))])
    out.family("nvml_worker_respawns_total", "counter", "NVML worker processes respawned.",
               [((), float(stats.get("respawns", 0)))])
    out.family("nvml_stuck_workers", "gauge",
               "NVML workers that survived SIGKILL (blocked in the driver).",
               [((), float(stats.get("stuck_workers", 0)))])
    listed = dig(snap, "gpus")
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
    ecc_types = ("corrected", "uncorrected") if telemetry else ("uncorrected",)
    out.family("gpu_ecc_errors_total", "counter",
               "ECC errors by type and NVML counter (volatile resets at driver load).", (
                   (lab + (("type", t), ("counter", c)), as_float(dig(g, "ecc", c, t)))
                   for g, lab in idx for c in ("volatile", "aggregate") for t in ecc_types))
    per("gpu_remap_pending", "gauge", "1 when a row remap waits for a GPU reset.",
        lambda g: as_float(dig(g, "remapped_rows", "pending")))
    per("gpu_remap_failed", "gauge", "1 when a row remap failed (the GPU needs service).",
        lambda g: as_float(dig(g, "remapped_rows", "failure")))
    if telemetry:
        _telemetry(out, idx, per)
    out.family("gpu_xid_errors_total", "counter",
               "XID errors since boot by GPU index and XID code (kernel log and NVML events).", (
                   ((("gpu", _key_text(gpu)), ("xid", _key_text(code))), as_float(n))
                   for (gpu, code), n in sorted(report.xid_counts.items(), key=_xid_key)))


def _telemetry(out: Writer, idx: Sequence[Tuple[Mapping[str, Any], Labels]], per: Any) -> None:
    """The per-GPU series behind ``run.gpu_telemetry`` (module docstring: which duplicate
    dcgm-exporter's default counters)."""
    per("gpu_memory_total_bytes", "gauge", "Total framebuffer memory.",
        lambda g: as_float(dig(g, "memory", "total_bytes")))
    per("gpu_memory_used_bytes", "gauge", "Used framebuffer memory.",
        lambda g: as_float(dig(g, "memory", "used_bytes")))
    per("gpu_temperature_celsius", "gauge", "GPU core temperature.",
        lambda g: as_float(dig(g, "temperature", "gpu_c")))
    per("gpu_slowdown_temperature_celsius", "gauge", "Temperature at which the GPU slows down.",
        lambda g: as_float(dig(g, "temperature", "slowdown_c")))
    per("gpu_shutdown_temperature_celsius", "gauge", "Temperature at which the GPU shuts down.",
        lambda g: as_float(dig(g, "temperature", "shutdown_c")))
    out.family("gpu_remapped_rows", "gauge", "Rows remapped, by the kind of error behind it.", (
        (lab + (("cause", cause),), as_float(dig(g, "remapped_rows", cause)))
        for g, lab in idx for cause in ("correctable", "uncorrectable")))
    out.family("gpu_clock_event_active", "gauge", "1 while a slowdown reason is active.", (
        (lab + (("reason", reason),), _clock_event(g, reason))
        for g, lab in idx for reason in CLOCK_EVENTS))
    per("gpu_pcie_link_width", "gauge", "Current PCIe link width (lanes).",
        lambda g: as_float(dig(g, "pcie", "width_current")))
    per("gpu_pcie_link_width_max", "gauge", "Maximum PCIe link width (lanes).",
        lambda g: as_float(dig(g, "pcie", "width_max")))
    per("gpu_pcie_link_generation", "gauge", "Current PCIe link generation.",
        lambda g: as_float(dig(g, "pcie", "gen_current")))
    per("gpu_nvlink_links", "gauge", "NVLinks the GPU has (0 without NVLink).",
        lambda g: _nvlinks(g, False))
    per("gpu_nvlink_links_active", "gauge", "NVLinks that are active.",
        lambda g: _nvlinks(g, True))
    per("gpu_persistence_mode_enabled", "gauge", "1 when persistence mode is on.",
        lambda g: as_float(g.get("persistence_mode")))
    out.family("gpu_mig_mode_enabled", "gauge", "1 when MIG mode is enabled (current, pending).", (
        (lab + (("state", state),), _mig(g, state)) for g, lab in idx
        for state in ("current", "pending")))


def _clock_event(g: Mapping[str, Any], reason: str) -> Optional[float]:
    active = dig(g, "clock_event_reasons", "active")
    return float(reason in active) if isinstance(active, list) else None


def _nvlinks(g: Mapping[str, Any], active_only: bool) -> Optional[float]:
    links = dig(g, "nvlink", "links")
    if not isinstance(links, list):
        return None
    return float(sum(1 for link in links if not active_only or dig(link, "active") is True))


def _mig(g: Mapping[str, Any], state: str) -> Optional[float]:
    value = dig(g, "mig", state)
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
