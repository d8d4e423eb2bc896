"""docs/metrics.md is the hand-written catalogue: what the agent emits must match it, both
ways (no undeclared metric ships; none declared goes missing), with type and label names."""
import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from agent.outputs import metrics
from tests.unit.metrics_fixtures import CHECKS, report, run_report, snapshot

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
ROW = re.compile(r"^\| `(gpu_node_agent_[a-z0-9_]+)` \| (gauge|counter) \|([^|]*)\|")


def catalogue():
    out = {}
    for line in DOC.read_text().splitlines():
        m = ROW.match(line)
        if m:
            labels = frozenset(re.findall(r"`([a-z_]+)`", m.group(3)))
            assert m.group(1) not in out, f"{m.group(1)} declared twice"
            out[m.group(1)] = (m.group(2), labels)
    return out


def emitted():
    """Everything the renderer can emit: a full report, a snapshot, NVML stats, XIDs."""
    body = metrics.render(run_report(
        CHECKS, "1.2.3", "dra", report=report(), gpus=snapshot(),
        nvml_stats={"timeouts": 1}, xid_counts={("0", "79"): 1}, last_success=1.0))
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
                                               gpus=snapshot(), xid_counts={("0", "79"): 1}))
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            if fam.type == "counter":
                assert s.name.endswith("_total"), s.name
            if s.name.endswith("_info"):
                assert s.value == 1, s.name
