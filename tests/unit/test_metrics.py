"""The exposition: one-hot status from the start, values from the inputs, label hygiene."""
import math
import os
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agent.daemon.driver import nvidia_majors
from agent.daemon.parts import verdict_line, xid_counts
from agent.outputs import metrics, textfile
from tests.unit.metrics_fixtures import CHECKS, report, run_report, snapshot


def _parse(body: bytes):
    """Independent parser (prometheus_client's) -> {name: [(labels, value)]}."""
    out = {}
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def _value(parsed, name, **labels):
    rows = [v for lab, v in parsed[name] if all(lab.get(k) == str(w) for k, w in labels.items())]
    assert len(rows) == 1, (name, labels, parsed.get(name))
    return rows[0]


def test_every_check_has_one_hot_status_before_the_first_run():
    parsed = _parse(metrics.render(run_report(CHECKS, "1.2.3", "dra"), check_details=True))
    for check in CHECKS:
        rows = {lab["status"]: v for lab, v in parsed["gpu_node_agent_check_status"]
                if lab["check"] == check.id}
        assert rows == {"pass": 0, "warn": 0, "fail": 0, "unknown": 1, "skip": 0}
        assert _value(parsed, "gpu_node_agent_check_last_run_timestamp_seconds",
                      check=check.id) == 0
    assert all(v == 0 for _, v in parsed["gpu_node_agent_gate_open"])
    assert len(parsed["gpu_node_agent_gate_open"]) == 4
    assert _value(parsed, "gpu_node_agent_last_success_timestamp_seconds") == 0
    assert "gpu_node_agent_gpu_info" not in parsed  # no snapshot: no per-GPU series at all
    assert _value(parsed, "gpu_node_agent_nvml_up") == 0


def test_status_follows_the_report_one_hot():
    rep = report()
    parsed = _parse(metrics.render(run_report(
        CHECKS, "1.2.3", "dra", report=rep, last_run={"time-sync": 1700000001.5}),
        check_details=True))
    for r in rep.results:
        rows = {lab["status"]: v for lab, v in parsed["gpu_node_agent_check_status"]
                if lab["check"] == r.id}
        assert sum(rows.values()) == 1 and rows[str(r.status)] == 1
    assert _value(parsed, "gpu_node_agent_check_last_run_timestamp_seconds",
                  check="time-sync") == 1700000001.5
    # gpu-xid fails and nvml-responsive is unknown: both critical and gating dra
    assert _value(parsed, "gpu_node_agent_gate_open", path="dra") == 0
    assert _value(parsed, "gpu_node_agent_gate_open", path="operator-gpucluster") == 1
    assert _value(parsed, "gpu_node_agent_check_info", check="toolkit-version",
                  severity="warning", interval="slow") == 1
    assert _value(parsed, "gpu_node_agent_time_offset_seconds") == 0.25
    assert _value(parsed, "gpu_node_agent_time_synced") == 1  # warn = synced, offset large
    assert _value(parsed, "gpu_node_agent_toolkit_info", version="1.18.0") == 1
    assert _value(parsed, "gpu_node_agent_driver_info", version="580.95.05") == 1


def test_time_sync_unknown_is_nan_not_zero():
    parsed = _parse(metrics.render(run_report(CHECKS[:1], "1", "dra")))
    assert math.isnan(_value(parsed, "gpu_node_agent_time_synced"))
    assert math.isnan(_value(parsed, "gpu_node_agent_time_offset_seconds"))


def test_gpu_series_carry_the_snapshot_values():
    snap = snapshot()
    parsed = _parse(metrics.render(run_report(CHECKS, "1", "dra", gpus=snap), gpu_telemetry=True))
    g0 = snap["gpus"][0]
    assert _value(parsed, "gpu_node_agent_gpus") == 2
    assert _value(parsed, "gpu_node_agent_gpu_temperature_celsius", gpu=0) == g0["temperature"]["gpu_c"]
    assert _value(parsed, "gpu_node_agent_gpu_temperature_celsius", gpu=1) == 55
    assert _value(parsed, "gpu_node_agent_gpu_ecc_errors_total", gpu=0, type="uncorrected",
                  counter="volatile") == g0["ecc"]["volatile"]["uncorrected"]
    assert _value(parsed, "gpu_node_agent_gpu_ecc_errors_total", gpu=0, type="corrected",
                  counter="aggregate") == g0["ecc"]["aggregate"]["corrected"]
    assert _value(parsed, "gpu_node_agent_gpu_remap_pending", gpu=0) == 1
    assert _value(parsed, "gpu_node_agent_gpu_remap_failed", gpu=0) == 0
    assert _value(parsed, "gpu_node_agent_gpu_remapped_rows", gpu=0, cause="uncorrectable") == 1
    assert _value(parsed, "gpu_node_agent_gpu_clock_event_active", gpu=0, reason="hw_slowdown") == 1
    assert _value(parsed, "gpu_node_agent_gpu_clock_event_active", gpu=0,
                  reason="sw_thermal_slowdown") == 0
    assert _value(parsed, "gpu_node_agent_gpu_nvlink_links", gpu=0) == 18
    assert _value(parsed, "gpu_node_agent_gpu_nvlink_links_active", gpu=0) == 17
    assert _value(parsed, "gpu_node_agent_gpu_nvlink_links", gpu=1) == 0
    assert _value(parsed, "gpu_node_agent_gpu_pcie_link_width", gpu=0) == 8
    assert _value(parsed, "gpu_node_agent_gpu_mig_mode_enabled", gpu=0, state="pending") == 1
    assert _value(parsed, "gpu_node_agent_gpu_mig_mode_enabled", gpu=0, state="current") == 0
    assert _value(parsed, "gpu_node_agent_gpu_persistence_mode_enabled", gpu=1) == 0
    assert _value(parsed, "gpu_node_agent_gpu_responding", gpu=0) == 1
    assert _value(parsed, "gpu_node_agent_gpu_responding", gpu=1) == 0
    # a label value with a quote and a backslash survives the round trip
    assert _value(parsed, "gpu_node_agent_gpu_info", gpu=0)
    assert [lab["uuid"] for lab, _ in parsed["gpu_node_agent_gpu_info"]][0] == g0["uuid"]


def test_identity_only_on_the_info_series():
    parsed = _parse(metrics.render(run_report(
        CHECKS, "1", "dra", report=report(), gpus=snapshot(), xid_counts={("0", "79"): 1}),
        gpu_telemetry=True, check_details=True))
    for name, rows in parsed.items():
        if name == "gpu_node_agent_gpu_info":
            continue
        if name == "gpu_node_agent_gpu_healthy":  # gpu and uuid by design (docs/metrics.md)
            assert all(set(labels) == {"gpu", "uuid"} for labels, _ in rows)
            continue
        for labels, _ in rows:
            assert not {"uuid", "name", "pci_bus_id"} & set(labels), name


def test_nvml_error_snapshot():
    snap = {"schema_version": 1, "error": {"kind": "timeout", "message": "x"}, "gpus": []}
    parsed = _parse(metrics.render(run_report(
        CHECKS, "1", "dra", gpus=snap, nvml_stats={"timeouts": 3, "respawns": 2,
                                                   "stuck_workers": 1})))
    assert _value(parsed, "gpu_node_agent_nvml_up") == 0
    assert "gpu_node_agent_gpus" not in parsed
    assert _value(parsed, "gpu_node_agent_nvml_timeouts_total") == 3
    assert _value(parsed, "gpu_node_agent_nvml_worker_respawns_total") == 2
    assert _value(parsed, "gpu_node_agent_nvml_stuck_workers") == 1


def test_xid_counts_from_the_gpu_xid_details():
    counts = xid_counts(report())
    assert counts == {("0", "79"): 2, ("1", "13"): 1, ("0000:cb:00.0", "48"): 1}
    parsed = _parse(metrics.render(run_report(CHECKS, "1", "dra", xid_counts=counts)))
    assert _value(parsed, "gpu_node_agent_gpu_xid_errors_total", gpu=0, xid=79) == 2
    assert xid_counts(None) == {}


def test_no_timestamps_and_textfile_is_atomic(tmp_path):
    body = metrics.render(run_report(CHECKS, "1", "dra", report=report(),
                                               gpus=snapshot()))
    samples = [s for f in text_string_to_metric_families(body.decode()) for s in f.samples]
    assert samples and all(s.timestamp is None for s in samples)  # textfile rejects timestamps
    target = textfile.write_textfile(str(tmp_path), body)
    assert target.endswith(".prom") and Path(target).read_bytes() == body
    assert os.listdir(tmp_path) == ["gpu_node_agent.prom"]
    assert oct(os.stat(target).st_mode & 0o777) == "0o644"


def test_textfile_failure_leaves_no_temp(tmp_path):
    os.mkdir(tmp_path / "gpu_node_agent.prom")  # rename onto a directory fails
    with pytest.raises(OSError):
        textfile.write_textfile(str(tmp_path), b"x 1\n")
    assert os.listdir(tmp_path) == ["gpu_node_agent.prom"]


def test_proc_devices_parsing():
    text = ("Character devices:\n  1 mem\n195 nvidia-frontend\n195 nvidia\n508 nvidia-uvm\n"
            "510 nvidia-caps\n\nBlock devices:\n  8 sd\n259 nvidiafake\n")
    assert nvidia_majors(text) == {(195, "nvidia-frontend"), (195, "nvidia"),
                                   (508, "nvidia-uvm"), (510, "nvidia-caps")}
    assert nvidia_majors(None) == set()


def test_verdict_line():
    line = verdict_line(report())
    assert line.startswith("gate dra CLOSED by gpu-xid,nvml-responsive;")
    assert "1 fail" in line and "1 unknown" in line
