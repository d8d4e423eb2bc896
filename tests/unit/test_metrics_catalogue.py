"""docs/metrics.md is the hand-written catalogue: what the agent emits must match it, both
ways (no undeclared metric ships; none declared goes missing), with type and label names."""
import copy
import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from agent.outputs import metrics
from agent.report import NodeFacts
from tests.unit.metrics_fixtures import CHECKS, GPU, report, run_report, snapshot

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
ROW = re.compile(r"^\| `(gpu_node_agent_[a-z0-9_]+)` \| (gauge|counter) \|([^|]*)\|")


def _rows(pattern):
    """The catalogue table's lines ``pattern`` matches, as matches."""
    return [m for m in map(pattern.match, DOC.read_text().splitlines()) if m]


def catalogue():
    out = {}
    for m in _rows(ROW):
        labels = frozenset(re.findall(r"`([a-z_]+)`", m.group(3)))
        assert m.group(1) not in out, f"{m.group(1)} declared twice"
        out[m.group(1)] = (m.group(2), labels)
    return out


def emitted():
    """Everything the renderer can emit: a full report, a snapshot, NVML stats, XIDs."""
    body = metrics.render(run_report(
        CHECKS, "1.2.3", "dra", report=report(), gpus=snapshot(),
        nvml_stats={"timeouts": 1}, xid_counts={("0", "79"): 1}, last_success=1.0,
        node=NodeFacts(cordoned=True, publish_ok=True, last_success=2.0)),
        gpu_telemetry=True, check_details=True)
    out = {}
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            # prometheus_client strips "_total" from counter family names; the sample keeps it
            labels = frozenset(s.labels)
            prev = out.setdefault(s.name, (fam.type, labels))
            assert prev == (fam.type, labels), f"{s.name}: label sets differ between series"
    return out


def test_catalogue_parses():
    assert len(catalogue()) >= 30


def test_nothing_undeclared_ships():
    declared = catalogue()
    undeclared = sorted(set(emitted()) - set(declared))
    assert not undeclared, f"emitted but not in docs/metrics.md: {undeclared}"


def test_nothing_declared_goes_missing():
    missing = sorted(set(catalogue()) - set(emitted()))
    assert not missing, f"in docs/metrics.md but never emitted: {missing}"


def test_types_and_labels_match():
    declared = catalogue()
    for name, (mtype, labels) in emitted().items():
        assert declared[name] == (mtype, labels), name


def test_counters_end_in_total_and_info_is_one():
    body = metrics.render(run_report(CHECKS, "1", "dra", report=report(),
                                               gpus=snapshot(), xid_counts={("0", "79"): 1}),
                          gpu_telemetry=True, check_details=True)
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            if fam.type == "counter":
                assert s.name.endswith("_total"), s.name
            if s.name.endswith("_info"):
                assert s.value == 1, s.name


# -- the default exposition and its options (docs/metrics.md "Cardinality") --------------------
GATED = re.compile(r"^\| `(gpu_node_agent_[a-z0-9_]+)` \|.*Only with `run\.([a-z_]+): true`\. \|$")


def gated_rows():
    """{option: {series}} for the catalogue rows that say they need an option."""
    out = {}
    for m in _rows(GATED):
        out.setdefault(m.group(2), set()).add(m.group(1))
    return out


def _names(body):
    return {s.name for fam in text_string_to_metric_families(body.decode()) for s in fam.samples}


def _full(**options):
    return metrics.render(run_report(
        CHECKS, "1.2.3", "dra", report=report(), gpus=snapshot(),
        nvml_stats={"timeouts": 1}, xid_counts={("0", "79"): 1}, last_success=1.0), **options)


def test_each_option_adds_exactly_the_rows_the_catalogue_gives_it():
    rows = gated_rows()
    assert set(rows) == {"gpu_telemetry", "check_details"}
    default = _names(_full())
    assert _names(_full(gpu_telemetry=True)) - default == rows["gpu_telemetry"]
    assert _names(_full(check_details=True)) - default == rows["check_details"]
    # what the alerts read stays in the default (prometheus/alerts.yml)
    alerts = (DOC.parents[1] / "prometheus" / "alerts.yml").read_text()
    assert set(re.findall(r"gpu_node_agent_[a-z_]+", alerts)) - {
        "gpu_node_agent_check_info"} <= default  # check_info: only the pre-severity arm


def test_status_series_carry_the_check_severity():
    body = _full().decode()
    # metrics_fixtures: toolkit-version is a WARNING check, driver-branch a CRITICAL one
    assert ('gpu_node_agent_check_status{check="toolkit-version",status="pass",'
            'severity="warning"} 1') in body
    assert ('gpu_node_agent_check_status{check="driver-branch",status="fail",'
            'severity="critical"} 0') in body
    assert "gpu_node_agent_gpu_ecc_errors_total" in body and 'type="corrected"' not in body


def _host(checks, n_gpus, **options):
    """A host with ``n_gpus`` GPUs like metrics_fixtures.GPU (indexes 0..n-1) and ``checks``."""
    gpus = [dict(copy.deepcopy(GPU), index=i, uuid=f"GPU-{i}") for i in range(n_gpus)]
    snap = dict(snapshot(), gpus=gpus)
    body = metrics.render(run_report(checks, "1", "dra", report=report(), gpus=snap), **options)
    return sum(1 for line in body.decode().splitlines() if line and not line.startswith("#"))


def test_series_on_an_8_gpu_host_stay_under_the_ceiling():
    from checks.registry import ALL_CHECKS

    checks = list(ALL_CHECKS)
    # The ceiling: 200 series with 23 checks, each check beyond them adding its 5 statuses.
    ceiling = 200 + 5 * (len(checks) - 23)
    assert _host(checks, 8) <= ceiling
    # A check adds its five status series and nothing else ...
    assert _host(checks, 8) - _host(checks[:-1], 8) == 5
    # ... a GPU at most 8 (of the 85 the ceiling leaves beside 33 checks' 165 statuses and the
    # agent's 19, for 8 GPUs: identity, answering, uncorrected ECC x2, remap pending/failed,
    # room for a health series).
    assert _host(checks, 8) - _host(checks, 7) <= 8
    # The options are what costs: 3 per check, 21 per GPU (docs/metrics.md rows, by hand).
    assert _host(checks, 8, check_details=True) - _host(checks, 8) == 3 * len(checks)
    assert _host(checks, 8, gpu_telemetry=True) - _host(checks, 8) == 21 * 8


def test_renderer_reads_the_run_settings_at_each_call():
    from types import SimpleNamespace

    settings = SimpleNamespace(gpu_telemetry=False, check_details=False)
    render = metrics.renderer(lambda: settings)
    rep = run_report(CHECKS, "1", "dra", report=report(), gpus=snapshot())
    assert "gpu_node_agent_gpu_temperature_celsius" not in render(rep).decode()
    settings.gpu_telemetry = True  # a SIGHUP reload: the next Report renders with it
    assert "gpu_node_agent_gpu_temperature_celsius" in render(rep).decode()
    assert "gpu_node_agent_check_info" not in render(rep).decode()
