"""gpu-workload's seam (agent/host/workload.py) and its verdicts, without a runtime: the config
section, which hosts run the action (only a live Host whose path is opted in), the record
replayed from a bundle, and --host-root answering "not run"."""
from pathlib import Path

import pytest

from agent.config import Config, parse_config
from agent.errors import ConfigError
from agent.host.build import tree_host
from agent.host.bundle import load_bundle
from agent.host.seam import Host, StaticFacts, StaticGpus
from agent.host.workload import (
    Attempt,
    WorkloadFacts,
    choose_route,
    run_workload,
    spec_from_config,
    with_workload,
)
from checks.policy import ResolvedPolicy, load_policy
from checks.workload.gpu_workload import GPU_WORKLOAD

REPO = Path(__file__).resolve().parents[2]
BUNDLES = REPO / "tests/fixtures/bundles"
UUIDS = ["GPU-11111111-2222-3333-4444-555555555555", "GPU-66666666-7777-8888-9999-000000000000"]


def policy(path="dra", **workload):
    settings = Config(allocation_path=path, workload=workload).model_dump()
    return ResolvedPolicy(load_policy(2), path, settings=settings)


def test_default_config_runs_nothing():
    assert Config().workload.paths == []
    assert spec_from_config(Config()) is None
    host = Host("/", live=True, facts=StaticFacts({}))
    assert with_workload(host, Config()) == (host, False)


def test_a_path_outside_the_list_is_refused_with_the_field_named():
    with pytest.raises(ConfigError, match=r"workload\.paths"):
        parse_config("workload:\n  paths: [gpu-everywhere]\n", "cfg.yaml")


def test_opted_in_live_host_gets_the_fact_source_and_runs_once():
    config = Config(allocation_path="device-plugin", workload={"paths": ["device-plugin"]})
    calls = []

    def runner(spec):
        calls.append(spec)
        return {"ran": spec.mode}

    facts = WorkloadFacts(StaticFacts({"node": "n"}), spec_from_config(config), runner)
    assert facts.fact("workload") == {"ran": "handler"}
    assert facts.fact("workload") == {"ran": "handler"}
    assert facts.fact("node") == "n"
    assert len(calls) == 1 and calls[0].handler == "nvidia"


def test_a_tree_is_never_given_the_action():
    config = Config(workload={"paths": ["dra"]})
    host = tree_host(str(BUNDLES / "gpu-workload-pass" / "root"))
    assert with_workload(host, config, force=True)[1] is False
    outcome = GPU_WORKLOAD.run(host, policy(paths=["dra"]))
    assert outcome.status == "skip" and outcome.skip == "input-missing"
    assert GPU_WORKLOAD.run(host, policy()).skip == "not-applicable"


def test_route_auto_follows_the_kubelet_socket(tmp_path):
    spec = spec_from_config(Config(workload={"paths": ["dra"],
                                             "kubelet_socket": str(tmp_path / "k.sock")}))
    assert choose_route(spec) == "cri"
    (tmp_path / "k.sock").write_text("")
    assert choose_route(spec) == "native"


def test_missing_socket_is_the_runtime_step(tmp_path):
    spec = spec_from_config(Config(workload={"paths": ["dra"], "socket": str(tmp_path / "no")}))
    rec = run_workload(spec, routes={})
    assert rec["failed_step"] == "runtime" and str(tmp_path / "no") in rec["error"]


def _host(record, uuids=UUIDS):
    snap = {"gpus": [{"index": i, "uuid": u} for i, u in enumerate(uuids)]}
    return Host("/nonexistent", facts=StaticFacts({"workload": record}), gpus=StaticGpus(snap))


def _record(output, step=None, **kw):
    spec = spec_from_config(Config(workload={"paths": ["dra"]}))
    att = Attempt(spec, "cri")
    att.exit_code, att.output = 0, output
    if step:
        att.fail(step, "boom", deadline=kw.get("deadline", False))
    return att.record()


def test_uuids_are_held_against_nvml():
    out = "".join(f"GPU {i}: NVIDIA H100 (UUID: {u})\n" for i, u in enumerate(UUIDS))
    assert GPU_WORKLOAD.run(_host(_record(out)), policy()).status == "pass"
    half = GPU_WORKLOAD.run(_host(_record(out.splitlines()[0])), policy())
    assert half.status == "fail" and half.code == "output-mismatch" and UUIDS[1] in half.summary
    # A device-plugin path does not judge a record of the CDI route.
    assert GPU_WORKLOAD.run(_host(_record(out)), policy("device-plugin")).skip == "not-applicable"


@pytest.mark.parametrize("step,code", [("sandbox", "sandbox-failed"), ("create", "create-failed"),
                                       ("start", "start-failed"), ("exit", "exit-nonzero")])
def test_each_step_has_its_code(step, code):
    outcome = GPU_WORKLOAD.run(_host(_record("", step)), policy())
    assert outcome.status == "fail" and outcome.code == code and f"`{step}`" in outcome.summary


def test_deadline_wins_over_the_step():
    outcome = GPU_WORKLOAD.run(_host(_record("", "sandbox", deadline=True)), policy())
    assert outcome.code == "deadline" and "`sandbox`" in outcome.summary


def test_missing_image_skips_when_configured():
    spec = spec_from_config(Config(workload={"paths": ["dra"]}))
    att = Attempt(spec, "cri")
    att.fail("image", "not found")
    att.image_missing = True
    host = _host(att.record())
    assert GPU_WORKLOAD.run(host, policy()).code == "image-missing"
    assert GPU_WORKLOAD.run(host, policy(skip_if_image_missing=True)).skip == "configured"


def test_bundle_replays_the_recorded_outcome():
    loaded = load_bundle(BUNDLES / "gpu-workload-start-failed")
    try:
        outcome = GPU_WORKLOAD.run(loaded.host, policy())
    finally:
        loaded.close()
    assert outcome.code == "start-failed" and "nvidia-container-cli" in outcome.summary
    assert GPU_WORKLOAD.since_policy == 2 and str(GPU_WORKLOAD.interval) == "bootstrap-only"


def test_a_missing_client_is_tool_missing_on_both_routes(tmp_path, monkeypatch):
    import agent.host.workload_cri as cri_route

    def no_grpc():
        raise ImportError("No module named 'grpc'")

    monkeypatch.setattr(cri_route, "_import", no_grpc)
    sock = tmp_path / "containerd.sock"
    sock.write_text("")  # run_workload only asks that the socket path exists
    base = {"paths": ["dra"], "socket": str(sock), "ctr": str(tmp_path / "no-ctr")}
    for route in ("cri", "native"):
        spec = spec_from_config(Config(workload={**base, "route": route}))
        rec = run_workload(spec)
        assert rec["failed_step"] == "tool" and rec["route"] == route
        outcome = GPU_WORKLOAD.run(_host(rec), policy())
        assert outcome.status == "unknown" and outcome.code == "tool-missing"
    assert "gpu-node-agent[workload]" in cri_route.CriRoute().run(spec_from_config(
        Config(workload={**base, "route": "cri"})))["error"]


def test_collect_parses_with_workload():
    from agent.cli import build_parser

    args = build_parser().parse_args(["collect", "--with-workload", "-o", "x.tar.gz"])
    assert args.with_workload is True
    assert build_parser().parse_args(["collect"]).with_workload is False


@pytest.mark.parametrize("paths,installed", [(["dra"], True), ([], False)])
def test_run_gives_its_live_host_the_action_only_when_opted_in(monkeypatch, paths, installed):
    # `run` once at start: its bootstrap cycle's live Host (agent/cli_run.py host_opener).
    import types

    import agent.host.build as build
    from agent.cli_run import host_opener

    monkeypatch.setattr(build, "live_host", lambda config, gpus=None: Host(
        "/", live=True, facts=StaticFacts({})))
    api = types.SimpleNamespace(wrap=lambda host, config: host)
    args = types.SimpleNamespace(bundle=None, host_root=None)
    gen = types.SimpleNamespace(config=Config(workload={"paths": paths}))
    with host_opener(args, None, api)(gen) as host:
        assert isinstance(host._facts, WorkloadFacts) is installed
