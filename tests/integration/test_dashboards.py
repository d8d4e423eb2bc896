"""Every panel query of prometheus/dashboards/*.json run against a real Prometheus that scraped
real agents on named fixture hosts (tests/integration/dashboards_env.py), with
prometheus/recording.yml loaded; each returns exactly the label sets written here from the
fixture hosts' verdicts (`gpu-node-agent check --bundle tests/fixtures/bundles/<b>`).

The hosts (instance label: bundle):
- ready: full-healthy-dra. dra gate open; 8 H100s; driver 580.173.02, toolkit 1.18.0.
- kubelet-too-old: demo-kubelet-too-old. dra gate closed by kubelet-version alone; its agent
  then refuses a SIGHUP reload of an invalid config (config_last_reload_successful 0).
- xid-79: xid-79-kmsg. XID 79 ("GPU has fallen off the bus") on GPU 7 in the kernel log:
  gpu-xid fails, GPU 7 unhealthy; a bare capture, so most other checks are unknown.
- gpu-lost: gpu-lost. NVML answers for GPU 3 with GPU_IS_LOST (no UUID): GPU 3 not responding.
- nvml-failed: nvml-responsive-nvml-failed. The snapshot is an NVML error: nvml_up 0.
- nvml-wedged: host-foundation-only's tree with the real NVML worker over the simulated
  library, every call hanging (hang-handle.json): nvml_up 0, NVML timeouts and worker respawns
  rising; no GPU listed.
- down: a target nothing listens on (up 0).
In a job of their own (tests/integration/dashboards_kube.py), two agents whose Node publisher
writes to the API double, both with gpu-xid failing: cordoned (kube.cordon_on_fatal: true,
its Node cordoned) and not-cordoning (the option off, its Node schedulable).

A padded query (`or vector(0)` and the like) is refused by text and by behaviour: every query
returns nothing for a job that does not exist.
"""
import json
import platform
import re
import shutil
import subprocess
from typing import Dict

import pytest

from agent.version import version
from tests.components import component
from tests.integration.agentproc import BUNDLES, agent_argv
from tests.integration.dashboards_env import (
    AGENTS,
    BAD_RELOAD,
    DOWN,
    HOSTS,
    JOB,
    PROM_DIR,
    WEDGED,
    WEDGED_CONFIG,
    WEDGED_ROOT,
    Fleet,
    label_sets,
    substitute,
    targets,
    wedged_env,
)
from tests.integration.dashboards_kube import KUBE_JOB

pytestmark = pytest.mark.integration
ANY = None  # a value not asserted (a time or a duration)

# The configured (dra) gate's blocking checks, from each bundle's `check --format json`
# gate.blocking (test_blocking_checks_are_the_agents_own re-reads them).
BLOCKING = {
    "kubelet-too-old": ["kubelet-version"],
    "xid-79": ["driver-loaded", "fabric-manager", "toolkit-version", "containerd-cdi",
               "kubelet-version", "mig-mode", "time-sync", "gpu-xid", "gpu-ecc", "gpu-row-remap"],
    "gpu-lost": ["driver-loaded", "gpu-count", "toolkit-version", "containerd-cdi",
                 "kubelet-version", "time-sync", "gpu-xid"],
    "nvml-failed": ["driver-loaded", "nvml-responsive", "toolkit-version", "containerd-cdi",
                    "kubelet-version", "time-sync", "gpu-xid"],
    "nvml-wedged": ["driver-loaded", "nvml-responsive", "toolkit-version", "containerd-cdi",
                    "kubelet-version", "time-sync", "gpu-xid"],
}
# Checks whose status is warn/fail/unknown, with their severity (checks/registry.py), per host.
W, C = "warning", "critical"
NOT_PASSING = {
    "ready": [],
    "xid-79": [("os-supported", W, "unknown"), ("driver-loaded", C, "fail"), ("gpu-count", C, "warn"),
               ("driver-persistence", W, "unknown"), ("fabric-manager", C, "unknown"),
               ("toolkit-version", C, "unknown"), ("containerd-nvidia-runtime", C, "fail"),
               ("containerd-cdi", C, "unknown"), ("kubelet-version", C, "unknown"),
               ("mig-mode", C, "unknown"), ("time-sync", C, "unknown"), ("gpu-xid", C, "fail"),
               ("gpu-ecc", C, "unknown"), ("gpu-row-remap", C, "unknown"),
               ("gpu-thermal", W, "unknown"), ("gpu-pcie-link", W, "unknown"),
               ("gpu-nvlink", W, "unknown")],
    "gpu-lost": [("os-supported", W, "unknown"), ("driver-loaded", C, "fail"), ("gpu-count", C, "fail"),
                 ("toolkit-version", C, "unknown"), ("containerd-nvidia-runtime", C, "fail"),
                 ("containerd-cdi", C, "unknown"), ("kubelet-version", C, "unknown"),
                 ("time-sync", C, "unknown"), ("gpu-xid", C, "unknown")],
}


def lbl(**kw):
    """A label set as the API returns it: `__name__` given as name_, `-` in keys as `_`."""
    if "name_" in kw:
        kw["__name__"] = kw.pop("name_")
    return tuple(sorted(kw.items()))


def j(**kw):
    return lbl(job=JOB, **kw)


def fleet_expectations():
    """(panel title, refId) -> {label set: value or ANY}."""
    counts: Dict[str, int] = {}
    for checks in BLOCKING.values():
        for c in checks:
            counts[c] = counts.get(c, 0) + 1
    return {
        ("Nodes by gate state", "A"): {lbl(path="dra", state="open"): 1,
                                       lbl(path="dra", state="closed"): 5},
        ("Closed nodes by blocking check", "A"): {lbl(check=c): n for c, n in counts.items()},
        ("Closed nodes and their blocking checks", "A"): {
            j(name_="instance_check:gpu_node_agent_check_blocking:max", instance=h, check=c): 1
            for h, checks in BLOCKING.items() for c in checks},
        ("XID rate by code", "A"): {lbl(xid="79"): 0},  # one event, before the window: rate 0
        ("XIDs since boot by node and code", "A"): {lbl(instance="xid-79", xid="79"): 1},
        ("Nodes with a fatal GPU fault (cordon trigger)", "A"): {
            lbl(instance="xid-79", check="gpu-xid"): 1},
        # a bundle's agent never publishes to a Node: no node_cordoned series in this job
        ("Nodes cordoned by us", "A"): {},
        ("Unhealthy GPUs by node", "A"): {lbl(instance="xid-79"): 1, lbl(instance="gpu-lost"): 1},
        ("Unhealthy GPUs in the fleet", "A"): {lbl(): 2},
        # GPU 3 has no UUID (the bundle's gpus.json): an empty label is no label.
        ("GPUs not responding to NVML", "A"): {j(instance="gpu-lost", gpu="3"): 0},
        ("Agent problems", "A"): {j(name_="up", instance=DOWN): 0},
        ("Agent problems", "B"): {  # its agent was sent SIGHUP with an invalid config
            j(name_="gpu_node_agent_config_last_reload_successful", instance=BAD_RELOAD): 0},
        ("Agent problems", "C"): {},
        ("Agent versions", "A"): {lbl(version=version()): 6},
        ("Seconds since the last completed cycle", "A"): {j(instance=h): ANY for h in AGENTS},
        ("Check cycle duration", "A"): {
            j(name_="gpu_node_agent_cycle_duration_seconds", instance=h): ANY for h in AGENTS},
        ("NVML worker trouble", "A"): {
            j(name_="gpu_node_agent_nvml_up", instance="nvml-failed"): 0,
            j(name_="gpu_node_agent_nvml_up", instance=WEDGED): 0},
        ("NVML worker trouble", "B"): {},  # the simulated hang is killable: nothing stuck
        ("NVML worker trouble", "C"): {j(instance=WEDGED): ANY},
        ("NVML worker trouble", "D"): {j(instance=WEDGED): ANY},
    }


def gpu_inventory(host):
    """gpu_info from the bundle's gpus.json: the agent's input, not its output."""
    doc = json.loads((BUNDLES / HOSTS[host] / "gpus.json").read_text())
    out = {}
    for g in doc["gpus"]:
        labels = {k: g[k] for k in ("uuid", "name", "pci_bus_id") if g.get(k)}
        out[j(name_="gpu_node_agent_gpu_info", instance=host, gpu=str(g["index"]), **labels)] = 1
    return out


def node_expectations(host):
    n = {"instance": host}
    gate = {"ready": 1}.get(host, 0)
    paths = {"ready": {"device-plugin": 0, "dra": 1, "operator-clusterpolicy": 0,
                       "operator-gpucluster": 1}}.get(host, {})
    xid = host == "xid-79"
    unhealthy = {"xid-79": ("7", "GPU-00000000-0000-4000-8000-000000000007"),
                 "gpu-lost": ("3", "index:3")}.get(host)
    driver = {"ready": "580.173.02", "gpu-lost": "550.163.01"}.get(host)
    return {
        ("Gate of the configured path", "A"): {
            j(name_="instance_path:gpu_node_agent_gate_open:configured", path="dra", **n): gate},
        ("Gate by path", "A"): {
            j(name_="gpu_node_agent_gate_open", path=p, **n): paths.get(p, 0)
            for p in ("device-plugin", "dra", "operator-clusterpolicy", "operator-gpucluster")},
        ("Blocking checks", "A"): {
            j(name_="instance_check:gpu_node_agent_check_blocking:max", check=c, **n): 1
            for c in BLOCKING.get(host, [])},
        ("Checks not passing", "A"): {
            lbl(check=c, severity=s, status=st): 1 for c, s, st in NOT_PASSING[host]},
        ("Fatal GPU fault (cordon trigger)", "A"): {lbl(check="gpu-xid"): 1} if xid else {},
        ("XIDs since boot by GPU", "A"): {lbl(gpu="7", xid="79"): 1} if xid else {},
        ("XID rate by GPU", "A"): {lbl(gpu="7", xid="79"): 0} if xid else {},
        ("Unhealthy GPUs", "A"): {} if unhealthy is None else {
            j(name_="gpu_node_agent_gpu_healthy", gpu=unhealthy[0], uuid=unhealthy[1], **n): 0},
        ("GPUs not responding to NVML", "A"): (
            {j(gpu="3", **n): 0} if host == "gpu-lost" else {}),
        ("GPU inventory", "A"): gpu_inventory(host),
        ("NVML worker", "A"): {j(name_="gpu_node_agent_nvml_up", **n): 1},
        ("NVML worker", "B"): {j(**n): 0},
        ("NVML worker", "C"): {j(**n): 0},
        ("NVML worker", "D"): {j(name_="gpu_node_agent_nvml_stuck_workers", **n): 0},
        ("Agent", "A"): {j(name_="up", **n): 1},
        ("Agent", "B"): {j(name_="gpu_node_agent_build_info", version=version(),
                           python_version=platform.python_version(), **n): 1},
        ("Agent", "C"): {j(**n): ANY},
        ("Agent", "D"): {j(name_="gpu_node_agent_cycle_duration_seconds", **n): ANY},
        ("Agent", "E"): {j(name_="gpu_node_agent_config_last_reload_successful", **n): 1},
        ("Driver and toolkit", "A"): {} if driver is None else {
            j(name_="gpu_node_agent_driver_info", version=driver, **n): 1},
        ("Driver and toolkit", "B"): {
            j(name_="gpu_node_agent_toolkit_info", version="1.18.0", **n): 1} if host == "ready"
        else {},
        # a bundle's agent never publishes to a Node: no node_* series
        ("Node cordon and publish", "A"): {},
        ("Node cordon and publish", "B"): {},
    }


NODE_HOSTS = ("ready", "xid-79", "gpu-lost")


@pytest.fixture(scope="module")
def wedged(tmp_path_factory):
    from tests.nvml_sim import simlib

    try:
        return wedged_env(tmp_path_factory.mktemp("nvsim"))
    except simlib.SimUnavailable as exc:
        pytest.skip(f"simulated NVML unavailable: {exc}")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory, wedged):
    component("prometheus")
    f = Fleet(tmp_path_factory.mktemp("dashboards"), wedged)
    yield f
    f.stop()


def _check(prom, board, expectations, job, instance=""):
    problems = []
    for title, ref, expr in targets(board):
        want = expectations[(title, ref)]
        got = label_sets(prom.query(substitute(expr, job, instance)))
        if set(got) != set(want):
            problems.append(f"{board}/{instance or '-'} {title!r} {ref}: {expr}\n"
                            f"  missing {sorted(set(want) - set(got))}\n"
                            f"  unexpected {sorted(set(got) - set(want))}")
            continue
        for labels, value in want.items():
            if value is not ANY and got[labels] != value:
                problems.append(f"{board} {title!r} {ref} {labels}: {got[labels]} != {value}")
            if value is ANY:  # a duration or an age: finite and not negative
                assert 0 <= got[labels] < 3600, (title, ref, labels, got[labels])
    assert not problems, "\n".join(problems)


def test_fleet_panels_return_the_hosts_label_sets(fleet):
    component("prometheus")  # counted against each test that queries it
    _check(fleet.prom, "fleet", fleet_expectations(), JOB)


@pytest.mark.parametrize("host", NODE_HOSTS)
def test_node_panels_return_the_hosts_label_sets(fleet, host):
    component("prometheus")
    _check(fleet.prom, "node", node_expectations(host), JOB, host)


def test_cordoned_panel_lists_the_nodes_the_agent_cordoned(fleet):
    """The agents of dashboards_kube.py publish to the API double: both see gpu-xid fail (the
    cordon trigger), only the one with kube.cordon_on_fatal cordons its Node, and the panel
    lists that one alone."""
    component("prometheus")
    prefix = "gpu-node-agent.workload.example.com"  # kube.annotation_prefix's default
    cordoned, other = fleet.kube.node("cordoned"), fleet.kube.node("not-cordoning")
    assert cordoned["spec"].get("unschedulable") is True
    assert cordoned["metadata"]["annotations"][f"{prefix}/cordoned"] == "gpu-xid"
    assert "unschedulable" not in other["spec"]
    assert f"{prefix}/cordoned" not in other["metadata"].get("annotations", {})
    panels = {(t, r): e for t, r, e in targets("fleet")}
    got = {title: label_sets(fleet.prom.query(substitute(panels[(title, "A")], KUBE_JOB)))
           for title in ("Nodes cordoned by us", "Nodes with a fatal GPU fault (cordon trigger)")}
    assert got["Nodes cordoned by us"] == {lbl(instance="cordoned"): 1}
    assert got["Nodes with a fatal GPU fault (cordon trigger)"] == {
        lbl(instance="cordoned", check="gpu-xid"): 1,
        lbl(instance="not-cordoning", check="gpu-xid"): 1}
    # both published their whole verdict (the cordon among it) at the last attempt
    # the node view: the cordon (1, 0) and a whole verdict published (1) on each
    node_panel = {r: e for t, r, e in targets("node") if t == "Node cordon and publish"}
    for host, cordon in (("cordoned", 1), ("not-cordoning", 0)):
        k = {"job": KUBE_JOB, "instance": host}
        for ref, name, value in (("A", "gpu_node_agent_node_cordoned", cordon),
                                 ("B", "gpu_node_agent_node_publish_success", 1)):
            got = label_sets(fleet.prom.query(substitute(node_panel[ref], KUBE_JOB, host)))
            assert got == {lbl(name_=name, **k): value}, (host, ref, got)


def test_every_query_is_empty_for_a_job_that_does_not_exist(fleet):
    """A query padded to always answer (`or vector(0)`, `or on() vector(1)`, absent(...))
    returns something where there is nothing to show; none may."""
    component("prometheus")
    for board in ("fleet", "node"):
        for title, ref, expr in targets(board):
            assert fleet.prom.query(substitute(expr, "no-such-job", "ready")) == [], (title, ref)
    # the probe catches padding: the same query padded answers for the missing job
    padded = substitute('sum(job:gpu_node_agent_gpu_unhealthy:count{job=~"$job"}) or vector(0)',
                        "no-such-job")
    assert fleet.prom.query(padded) != []


def test_blocking_checks_are_the_agents_own(tmp_path, wedged):
    """BLOCKING (written above) is what the agent's JSON output says for each host."""
    cfg = tmp_path / "config.yaml"
    cfg.write_text(WEDGED_CONFIG)
    for host, want in BLOCKING.items():
        # `check` has no NVML worker: on the wedged host's tree nvml-responsive closes the
        # gate for want of an answer, as under the hanging NVML `run` sees.
        where = (["--host-root", str(WEDGED_ROOT)] if host == WEDGED
                 else ["--bundle", str(BUNDLES / HOSTS[host])])
        res = subprocess.run(agent_argv() + ["check", "--config", str(cfg), *where,
                                             "--format", "json"],
                             capture_output=True, text=True, timeout=120, env=wedged)
        assert res.stdout.startswith("{"), (host, res.returncode, res.stderr[-2000:])
        assert json.loads(res.stdout)["gate"]["blocking"] == want, host


# -- no Prometheus needed ----------------------------------------------------------------------
# vector(...) answers with no data behind it; absent() answers exactly when there is none;
# clamp_min/scalar turn nothing into a number; `or on()` matches any series at all.
PADDING = re.compile(r"\bvector\s*\(|\babsent(_over_time)?\s*\(|\bclamp_min\s*\(|\bscalar\s*\("
                     r"|\bon\s*\(\s*\)|\bor\s+on\b")


def padded(expr):
    return bool(PADDING.search(expr))


def test_no_query_is_padded_by_text():
    for good in ('up{job=~"$job"} == 0', "sum by (xid) (rate(x[5m]))"):
        assert not padded(good)
    for bad in ("sum(x) or vector(0)", "x or on() vector(1)", "absent(x)", "x or on () y",
                "absent_over_time(x[5m])", "clamp_min(sum(x), 0)", "x or\n  vector(0)"):
        assert padded(bad), bad
    for board in ("fleet", "node"):
        for title, ref, expr in targets(board):
            assert not padded(expr), (board, title, ref, expr)
            assert '$job' in expr, (board, title, ref, "every query is scoped to the job")
            if board == "node":
                assert '$instance' in expr, (title, ref, "the node view is scoped to the node")


def test_every_panel_target_has_an_expectation():
    assert set(fleet_expectations()) == {(t, r) for t, r, _ in targets("fleet")}
    for host in NODE_HOSTS:
        assert set(node_expectations(host)) == {(t, r) for t, r, _ in targets("node")}
    for board in ("fleet", "node"):
        doc = json.loads((PROM_DIR / "dashboards" / f"gpu-node-agent-{board}.json").read_text())
        names = [v["name"] for v in doc["templating"]["list"]]
        assert names == (["datasource", "job"] + (["instance"] if board == "node" else []))
        titles = [p["title"] for p in doc["panels"]]
        assert len(titles) == len(set(titles)), "panel titles are the expectations' keys"
        assert all(p.get("targets") for p in doc["panels"]), "a panel without a query"
        assert all(p["datasource"]["uid"] == "${datasource}" for p in doc["panels"])
        ids = [p["id"] for p in doc["panels"]]
        assert len(ids) == len(set(ids)), "panel ids are unique in a dashboard (Grafana)"
        for p in doc["panels"]:
            refs = [t["refId"] for t in p["targets"]]
            assert len(refs) == len(set(refs)), p["title"]
            assert all(t["datasource"]["uid"] == "${datasource}" for t in p["targets"])
            assert set(p["gridPos"]) == {"x", "y", "w", "h"} and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24


def test_recording_rules_with_promtool(tmp_path):
    promtool = component("promtool")
    rules = PROM_DIR / "recording.yml"
    res = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0 and "SUCCESS: 9 rules found" in res.stdout, res.stdout + res.stderr
    test_file = PROM_DIR / "tests" / "recording_test.yml"
    res = subprocess.run([promtool, "test", "rules", str(test_file)], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0 and "SUCCESS" in res.stdout, res.stdout + res.stderr
    # the tests can fail: a rule that lets a warning check block, drops the gate_blocking arm, or counts
    # healthy GPUs is caught
    text = rules.read_text()
    for old, new in (('gpu_node_agent_check_info{severity="critical"}', "gpu_node_agent_check_info"),
                     ("max by (job, instance, check) (gpu_node_agent_gate_blocking == 1)\n          or",
                      ""),
                     ("(gpu_node_agent_gpu_healthy == 0)", "(gpu_node_agent_gpu_healthy >= 0)"),
                     ("rate(gpu_node_agent_gpu_xid_errors_total[5m])",
                      "rate(gpu_node_agent_gpu_xid_errors_total[1m])")):
        assert old in text, old
        (tmp_path / "tests").mkdir(exist_ok=True)
        (tmp_path / "recording.yml").write_text(text.replace(old, new))
        shutil.copy(test_file, tmp_path / "tests" / "recording_test.yml")
        res = subprocess.run([promtool, "test", "rules", str(tmp_path / "tests" / "recording_test.yml")],
                             capture_output=True, text=True, timeout=120)
        assert res.returncode != 0, f"mutation {old!r} -> {new!r} not caught"
