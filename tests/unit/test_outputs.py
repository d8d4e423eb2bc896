"""Every output consumes the Report alone: one interface (agent/outputs/base.py), one
rendering of the exposition per Report shared by the endpoint and the textfile, the NFD file
as an output of its own, and a Report whose extra fields are frozen and never reach the JSON
(schema 1, docs/json-output.md)."""
import inspect
import io
import json
import logging
import os
from types import MappingProxyType

import pytest

from agent.config import Config
from agent.outputs import nfd
from agent.outputs.base import Output
from agent.outputs.metrics import MetricsEndpoint, Rendered, render
from agent.outputs.nfd_output import NfdOutput
from agent.outputs.node.publish import Publisher
from agent.outputs.render import JsonOutput, TextOutput, report_dict
from agent.outputs.textfile import TextfileOutput
from agent.report import RunFacts, build_report
from tests.kube_reports import report as kube_report
from tests.unit.metrics_fixtures import CHECKS, report, run_report, snapshot

# docs/report.schema.json's top-level properties (schema 1): nothing the Report carries for
# the other outputs may appear beside them.
SCHEMA_1_KEYS = {"schema", "path", "strict", "host", "agent_version", "generated_at", "gate",
                 "gates", "checks", "context", "publish", "policy_version", "gpus"}


class _Server:
    """What MetricsEndpoint needs of MetricsServer: publish(bytes) and stop()."""

    def __init__(self) -> None:
        self.bodies = []
        self.stopped = False

    def publish(self, body: bytes) -> None:
        self.bodies.append(body)

    def stop(self) -> None:
        self.stopped = True


@pytest.mark.parametrize("cls", [TextOutput, JsonOutput, MetricsEndpoint, TextfileOutput,
                                 NfdOutput, Publisher])
def test_every_output_has_publish_report_and_close(cls):
    publish = inspect.signature(cls.publish)
    assert list(publish.parameters) == ["self", "report"]
    assert list(inspect.signature(cls.close).parameters) == ["self"]


def test_instances_satisfy_the_protocol(tmp_path):
    made = [TextOutput(io.StringIO()), JsonOutput(io.StringIO()),
            MetricsEndpoint(_Server()), TextfileOutput(str(tmp_path), render),
            NfdOutput(Config())]
    assert all(isinstance(o, Output) for o in made)
    assert not isinstance(object(), Output)


def test_text_and_json_outputs_write_what_the_renderers_return():
    rep = report()
    text, js = io.StringIO(), io.StringIO()
    assert TextOutput(text).publish(rep) == text.getvalue()
    assert text.getvalue().startswith("gpu-node-agent check: test host, allocation path dra\n")
    JsonOutput(js).publish(rep)
    doc = json.loads(js.getvalue())
    assert doc["schema"] == 1 and doc["gate"] == {"open": False,
                                                  "blocking": ["gpu-xid", "nvml-responsive"]}


def test_the_json_never_shows_the_fields_added_for_the_other_outputs():
    plain = report()
    full = run_report(CHECKS, "1.2.3", "dra", report=plain, gpus=snapshot(),
                      nvml_stats={"timeouts": 4}, xid_counts={("0", "79"): 2},
                      last_success=5.0, start_time=1.0)
    assert set(report_dict(full)) <= SCHEMA_1_KEYS
    # `gpus` is the per-GPU verdict (agent/gpu_health.py), which the snapshot's GPUs feed;
    # the snapshot itself, the counters and the run's facts stay out.
    assert "driver_version" not in json.dumps(report_dict(full)["gpus"])
    assert ({k: v for k, v in report_dict(full).items() if k != "gpus"}
            == {k: v for k, v in report_dict(plain).items() if k != "gpus"})


def test_the_report_is_frozen_and_keeps_its_own_copies():
    last_run = {"time-sync": 1.0}
    stats = {"timeouts": 1}
    snap = snapshot()
    rep = build_report(report().results, "dra", False, "h", 0.0, "1", checks=CHECKS, gpus=snap,
                       nvml_stats=stats, xid_counts={("0", "79"): 1},
                       run=RunFacts(last_run=last_run, last_success=2.0))
    last_run["time-sync"] = 99.0  # the daemon's dicts move on after the cycle
    stats["timeouts"] = 7
    snap["driver_version"] = "changed"
    assert rep.run.last_run["time-sync"] == 1.0
    assert rep.nvml_stats["timeouts"] == 1
    assert rep.gpus["driver_version"] == "580.95.05"
    for mapping in (rep.run.last_run, rep.nvml_stats, rep.xid_counts, rep.gpus):
        assert isinstance(mapping, MappingProxyType)
        with pytest.raises(TypeError):
            mapping["x"] = 1  # type: ignore[index]
    with pytest.raises(AttributeError):  # frozen dataclass: FrozenInstanceError
        rep.gpus = None  # type: ignore[misc]
    assert [c.id for c in rep.checks] == [c.id for c in CHECKS]


def test_the_exposition_is_rendered_once_per_report_for_endpoint_and_textfile(tmp_path):
    calls = []

    def counting(rep):
        calls.append(rep)
        return render(rep)

    shared_render = Rendered(counting)
    server = _Server()
    endpoint = MetricsEndpoint(server, shared_render)
    textfile = TextfileOutput(str(tmp_path), shared_render)
    rep = run_report(CHECKS, "1", "dra", report=report())
    endpoint.publish(rep)
    textfile.publish(rep)
    assert len(calls) == 1
    assert (tmp_path / "gpu_node_agent.prom").read_bytes() == server.bodies[0]
    again = run_report(CHECKS, "1", "dra", report=report())  # equal, but another Report
    endpoint.publish(again)
    assert len(calls) == 2 and len(server.bodies) == 2
    endpoint.close()
    assert server.stopped


def test_rendered_returns_the_same_bytes_object_for_the_same_report():
    rendered = Rendered()
    rep = run_report(CHECKS, "1", "dra")
    first = rendered(rep)
    assert rendered(rep) is first
    assert first == render(rep)


def test_textfile_failure_is_logged_not_raised(tmp_path, caplog):
    missing = tmp_path / "absent"
    out = TextfileOutput(str(missing), render)
    with caplog.at_level(logging.ERROR):
        assert out.publish(run_report(CHECKS, "1", "dra")) is None
    assert "cannot write the textfile" in caplog.text
    assert not missing.exists()


def _nfd_config(path, **kube):
    return Config.model_validate({"kube": {"enabled": False, **kube},
                                  "nfd": {"enabled": True, "path": str(path)}})


def test_nfd_output_writes_the_node_labels_with_the_open_streak(tmp_path):
    path = tmp_path / "features.d" / "gpu-node-agent"
    out = NfdOutput(_nfd_config(path), clock=lambda: 1_700_000_000.0)
    healthy = kube_report()
    for _ in range(2):
        out.publish(healthy)
    labels = nfd.read_labels(str(path))
    # docs/kubernetes.md: the health label is the live gate; the allocation label waits for
    # kube.consecutive_opens (3) open runs.
    assert labels == {"workload.example.com/gpu-healthy": "true"}
    out.publish(healthy)
    assert nfd.read_labels(str(path)) == {"workload.example.com/gpu-healthy": "true",
                                          "workload.example.com/gpu-allocation": "dra"}
    out.publish(kube_report({"gpu-xid": "xid 79"}))
    assert out.opens == 0
    assert nfd.read_labels(str(path))["workload.example.com/gpu-healthy"] == "false"
    out.close()
    assert os.path.exists(path)  # close leaves the file; its expiry retires it


def test_nfd_output_dry_run_writes_nothing(tmp_path):
    path = tmp_path / "features.d" / "gpu-node-agent"
    out = NfdOutput(_nfd_config(path), dry_run=True, clock=lambda: 1_700_000_000.0)
    assert out.publish(kube_report()) == f"would write {path}"
    assert not path.exists()


def test_run_writes_the_nfd_file_alone_through_an_nfd_output(tmp_path):
    """`run` on the live machine with kube off and nfd on: the NFD output, no Publisher (and so
    no API session); with kube on the Publisher writes both (agent/cli_run.py)."""
    from types import SimpleNamespace

    from agent.cli_run import _node_outputs

    args = SimpleNamespace(dry_run=True, bundle=None, host_root=None)
    config = _nfd_config(tmp_path / "features.d" / "gpu-node-agent")
    outputs = _node_outputs(args, True, None)(SimpleNamespace(config=config))
    assert [type(o).__name__ for o in outputs] == ["NfdOutput"]
    assert outputs[0].dry_run is True
    # a fixture is never published, whatever the config says
    assert _node_outputs(args, False, None)(SimpleNamespace(config=config)) == []


def test_the_json_names_the_policy_version_the_verdicts_were_judged_by(tmp_path):
    from agent.cli import main

    for pinned, want in ((None, 2), (1, 1)):
        cfg = tmp_path / f"c{pinned}.yaml"
        cfg.write_text("allocation_path: dra\n" + (f"policy_version: {pinned}\n" if pinned else ""))
        out = io.StringIO()
        import contextlib

        with contextlib.redirect_stdout(out):
            main(["check", "--host-root", str(tmp_path), "--config", str(cfg), "--format", "json",
                  "--only", "os-supported"])
        assert json.loads(out.getvalue())["policy_version"] == want
