"""One hand-written case per kind of escape the fuzz tier found, with the answer each parser
must give (from docs/gpu-snapshot.md's types, the kernel's /dev/kmsg format, chronyc(1),
apimachinery's IsDNS1123Subdomain, the Prometheus text format), so a regression names
itself without a fuzz run."""
import copy
import json

import pytest

from agent.kube.credentials import parse_rfc3339
from agent.kube.kubeconfig import KubeconfigError, load
from agent.kube.nodename import resolve_node_name
from agent.outputs.metrics import render
from agent.xid.events import GpuMap, parse_xid
from agent.xid.journal import parse_journal_json
from agent.xid.kmsg import parse_line
from checks.gpu.driver_persistence import DRIVER_PERSISTENCE
from checks.gpu.gpu_count import GPU_COUNT
from checks.gpu.gpu_ecc import GPU_ECC
from checks.gpu.gpu_nvlink import GPU_NVLINK
from checks.gpu.gpu_thermal import GPU_THERMAL
from checks.gpu.mig_mode import MIG_MODE
from checks.nvml_responsive import NVML_RESPONSIVE
from checks.policy import ResolvedPolicy
from checks.registry import ALL_CHECKS
from checks.time.parsers import (
    Unparsable,
    parse_adjtimex,
    parse_chrony_sources,
    parse_chrony_tracking,
    parse_timesync_status,
)
from tests.fuzz.test_fuzz_gpu_snapshot import POLICY, SnapshotHost
from tests.fuzz.test_fuzz_nodename import FileHost
from tests.unit.metrics_fixtures import GPU, run_report

POL = ResolvedPolicy(POLICY, "dra", settings={})


def snapshot(**gpu_fields):
    gpu = copy.deepcopy(GPU)
    gpu.update(gpu_fields)
    return {"schema_version": 1, "error": None, "device_count": 1, "gpus": [gpu]}


def run(check, snap):
    return check.run(SnapshotHost(snap, None), POL)


# -- the GPU snapshot through the checks: unknown, naming the field ----------------------
@pytest.mark.parametrize("check, snap, field, words", [
    (GPU_ECC, snapshot(ecc=dict(GPU["ecc"], volatile={"uncorrected": "2"})),
     "gpus[0].ecc.volatile.uncorrected", "is a string, expected an integer"),
    (DRIVER_PERSISTENCE, snapshot(persistence_mode="yes"),
     "gpus[0].persistence_mode", "is a string, expected a boolean"),
    (GPU_THERMAL, snapshot(clock_event_reasons={"active": "hw_slowdown"}),
     "gpus[0].clock_event_reasons.active", "is a string, expected a list of strings"),
    (GPU_NVLINK, snapshot(nvlink={"supported": True, "links": [7]}),
     "gpus[0].nvlink.links[0]", "is an integer, expected an object"),
    (MIG_MODE, snapshot(mig={"current": ["enabled"], "pending": "enabled"}),
     "gpus[0].mig.current", "is a list, expected a string"),
])
def test_wrong_type_is_unknown_naming_the_field(check, snap, field, words):
    out = run(check, snap)
    assert str(out.status) == "unknown"
    assert f"{field} {words}" in out.summary


@pytest.mark.parametrize("snap, field, words", [
    ({"gpus": 5}, "gpus", "is an integer, expected a list"),
    ({"gpus": [{"index": "0"}]}, "gpus[0].index", "is a string, expected a non-negative integer"),
    ({"gpus": [{"index": True}]}, "gpus[0].index", "is a boolean, expected a non-negative integer"),
    ({"gpus": [{"index": 0, "error": "lost"}]}, "gpus[0].error", "is a string, expected an object"),
    ({"error": "boom"}, "error", "is a string, expected an object"),
    ({"gpus": [], "worker": {"wall_s": 10**400}}, "worker.wall_s", "is an integer out of range, expected a number"),
])
def test_structure_errors_make_nvml_responsive_unknown_and_the_gpu_checks_skip(snap, field, words):
    # nvml-responsive owns a malformed structure (unknown, snapshot-malformed); the GPU checks
    # skip naming it (checks/gpu/common.py gpu_check), each saying which field.
    out = run(NVML_RESPONSIVE, snap)
    assert (str(out.status), out.code) == ("unknown", "snapshot-malformed")
    assert out.details["field"] == field
    assert f"field {field} {words}" in out.summary
    for check in (GPU_COUNT, GPU_ECC, MIG_MODE):
        out = run(check, snap)
        assert (str(out.status), out.skip) == ("skip", "needs:nvml-responsive"), check.id
        assert out.details["field"] == field
        assert f"field {field} {words}" in out.summary


def test_device_count_past_any_nvml_count():
    words = "device_count is an integer out of range, expected an integer"
    out = run(NVML_RESPONSIVE, dict(snapshot(), device_count=10**400))
    assert (str(out.status), out.code) == ("unknown", "snapshot-malformed")
    assert words in out.summary
    out = run(GPU_COUNT, dict(snapshot(), device_count=10**400))
    assert (str(out.status), out.skip) == ("skip", "needs:nvml-responsive")
    assert words in out.summary


def test_lone_surrogate_in_a_label_prints():
    out = run(GPU_COUNT, {"gpus": [{"index": 0, "pci_bus_id": "\ud800",
                                    "error": {"kind": "gpu_lost", "message": "\udcff"}}]})
    assert str(out.status) == "fail"
    out.summary.encode("utf-8")  # would raise UnicodeEncodeError before
    out = run(NVML_RESPONSIVE, {"error": {"kind": "nvml_error", "message": "bad \ud800"}})
    assert str(out.status) == "fail" and out.summary == "NVML failed: nvml_error (bad ?)"


# -- kernel log lines ----------------------------------------------------------------------
def test_timestamp_longer_than_any_kernel_prints_is_message():
    line = parse_line("<4>[" + "9" * 5000 + ".000001] NVRM: x")
    assert line.mono_us is None and line.priority == 4
    assert line.message.startswith("[999")


def test_xid_code_of_5000_digits_is_no_xid():
    assert parse_xid(parse_line("NVRM: Xid (PCI:0000:9b:00): " + "7" * 5000 + ", pid=1")) is None
    ev = parse_xid(parse_line("6,812,5000000,-;NVRM: Xid (PCI:0000:9b:00): 79, pid=1, name=x"))
    assert (ev.code, ev.pci, ev.seq, ev.mono_us) == (79, "0000:9b:00", 812, 5000000)


def test_non_ascii_digits_and_bad_stamps():
    assert parse_line("<٣>[12.5] NVRM").priority is None  # Arabic-Indic 3 is not a priority
    # 0001-01-01T00:00:00Z is -62135596800 s; 14 h (50400 s) earlier at +14:00
    line = parse_line("0001-01-01T00:00:00+14:00 host kernel: NVRM: x")
    assert line.wall == -62135647200.0 and line.message == "NVRM: x"
    assert parse_line("2025-02-30T12:00:00Z host kernel: NVRM: y").wall is None  # no Feb 30
    lines, _ = parse_journal_json("\n".join([
        json.dumps({"MESSAGE": [78, 86, 300], "PRIORITY": "4"}),        # not bytes: skipped
        json.dumps({"MESSAGE": "NVRM: a", "PRIORITY": "²",              # isdigit, not a number
                    "_SOURCE_MONOTONIC_TIMESTAMP": "9" * 5000}),
        json.dumps({"MESSAGE": "NVRM: b", "__REALTIME_TIMESTAMP": 1e400}),
    ]))
    assert [(ln.message, ln.priority, ln.mono_us, ln.wall) for ln in lines] == [
        ("NVRM: a", None, None, None), ("NVRM: b", None, None, None)]


def test_gpu_map_keeps_only_schema_types():
    gpus = GpuMap({"gpus": [{"pci_bus_id": "00000000:9B:00.0", "index": [1], "uuid": {"x": 1}},
                            {"pci_bus_id": 5, "index": 1}]})
    assert gpus.by_pci == {"0000:9b:00": {"index": None, "uuid": None}}
    GpuMap([1, 2])  # a snapshot that is not an object: no GPUs, no error
    GpuMap({"gpus": 7})


# -- time-sync -------------------------------------------------------------------------------
def test_time_parsers_refuse_digits_int_refuses():
    tracking = "C0A80101,ntp1,²,1700000000.1,0.000001,0,0,0,0,0,0.001,0.001,64.0,Normal"
    assert isinstance(parse_chrony_tracking(tracking), Unparsable)
    sources = "^,*,ntp1," + "9" * 5000 + ",6,377,10,0.0001,0.0001,0.001"
    assert isinstance(parse_chrony_sources(sources), Unparsable)
    status = parse_timesync_status("Server: 10.0.0.1\nStratum: ²\nPacket count: 9\n")
    assert status.stratum is None and status.packets == 9
    fact = {"state": 0, "status": 0, "maxerror_us": 10**30, "esterror_us": 0}
    assert isinstance(parse_adjtimex(fact), Unparsable)
    assert parse_adjtimex(dict(fact, maxerror_us=1, offset_ns=float("nan"))).offset_s == 0.0


# -- node name ----------------------------------------------------------------------------
def test_node_name_must_be_one_the_api_server_accepts():
    assert resolve_node_name(FileHost({}, {}, {}, "GPU-Host-1")) == ("gpu-host-1", "hostname")
    name, why = resolve_node_name(FileHost({}, {}, {}, "gpu_host"))
    assert name is None
    assert why.startswith("hostname names 'gpu_host', not a DNS subdomain")
    nodeadm = "/etc/eks/nodeadm/nodeConfig.yaml"
    for text in ("kind: NodeConfig\nspec: {hybrid: {nodeName: [1, 2]}}\n",
                 "kind: NodeConfig\nspec: [x]\n", "a: !!timestamp 2001-13-45\n", "[" * 5000):
        assert resolve_node_name(FileHost({nodeadm: text}, {}, {}, "h1")) == ("h1", "hostname")
    name, why = resolve_node_name(FileHost(
        {"/etc/eks/kubelet/environment": "KUBELET_ARGS=--hostname-override=x/../y"}, {}, {},
        "h1"))
    assert name is None and "--hostname-override" in why


# -- metrics -----------------------------------------------------------------------------------
def test_renderer_on_malformed_snapshots():
    base = dict(checks=ALL_CHECKS, version="1", path="dra", start_time=0.0)
    body = render(run_report(gpus={"gpus": 5}, **base)).decode()
    assert "gpu_node_agent_gpus 0" in body and 'gpu="' not in body
    hot = snapshot(temperature={"gpu_c": 10**400, "slowdown_c": 87}, uuid="GPU-\ud800")
    body = render(run_report(gpus=hot, xid_counts={("²", "79"): 10**400}, **base),
                  gpu_telemetry=True).decode()
    assert "gpu_node_agent_gpu_temperature_celsius" not in body  # no float holds it
    assert 'gpu_node_agent_gpu_slowdown_temperature_celsius{gpu="0"} 87' in body
    assert 'uuid="GPU-?"' in body
    assert 'gpu_node_agent_gpu_xid_errors_total{gpu="²",xid="79"}' not in body


# -- kubeconfig --------------------------------------------------------------------------------
@pytest.mark.parametrize("text, words", [
    ("current-context: c\ncontexts: 5\n", "contexts is not a list"),
    ("current-context: [c]\n", "current-context is not a string"),
    ("current-context: !!timestamp 2001-13-45\n", "not valid YAML"),
    ("current-context: c\ncontexts: [{name: c, context: {cluster: {k: 1}}}]\n",
     "cluster is not a string"),
])
def test_kubeconfig_shapes_are_kubeconfig_errors(tmp_path, text, words):
    path = tmp_path / "kubeconfig"
    path.write_text(text)
    with pytest.raises(KubeconfigError, match=words):
        load(str(path))


def test_rfc3339_out_of_range():
    assert parse_rfc3339("2026-13-01T00:00:00Z") is None
    assert parse_rfc3339("2026-12-01T00:00:00.²Z") is None
    assert parse_rfc3339("2026-12-01T00:00:00.5Z") == 1796083200.5
