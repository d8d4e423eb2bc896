"""The Ansible role (ansible/roles/gpu_node_agent) run for real: ansible-core against localhost
over the local connection, into a temporary root prefix, installing the agent from this
checkout's wheel. Converge, idempotence, check mode, the gate (closed and open), nodeadm's
ordering and NodeConfig snippet, argument_specs, and a pytest-testinfra verify step."""
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any, Dict, List

import pytest

from tests.ansible import harness
from tests.ansible.verify_role import BIN, CONFIG, verify
from tests.components import component

pytestmark = pytest.mark.integration

BUNDLES = harness.REPO / "tests" / "fixtures" / "bundles"
HEALTHY = BUNDLES / "full-healthy-dra"  # every check passes (tests/checks/test_full_hosts.py)
NO_DRIVER = BUNDLES / "host-no-driver"
REPO_UNIT = harness.REPO / "systemd" / "gpu-node-agent.service"


@pytest.fixture(scope="module")
def ansible_ok() -> None:
    why = harness.available()
    if why:
        pytest.skip(why)


@pytest.fixture(scope="module")
def unit_src() -> Path:
    # The role finds the project's unit beside it in a checkout (no gpu_node_agent_unit_src).
    assert REPO_UNIT.is_file(), f"{REPO_UNIT} missing"
    return REPO_UNIT


def agent_gate(bin_path: str, config: str, bundle: Path) -> Dict[str, Any]:
    """The agent's own verdict on BUNDLE, read directly (the oracle for the role's message)."""
    proc = subprocess.run([bin_path, "check", "--format", "json", "--config", config,
                           "--bundle", str(bundle)], stdout=subprocess.PIPE, text=True, timeout=120)
    assert proc.returncode in (0, 1), proc
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def converged(ansible_ok, unit_src, tmp_path_factory) -> Dict[str, Any]:
    work = tmp_path_factory.mktemp("ansible-converge")
    wheelhouse = harness.build_wheelhouse(work / "wheelhouse")
    prefix = work / "root"
    prefix.mkdir()
    base = {
        "gpu_node_agent_root_prefix": str(prefix),
        "gpu_node_agent_wheelhouse": str(wheelhouse),
        "gpu_node_agent_python": harness.sys.executable,
        "gpu_node_agent_gate_bundle": str(HEALTHY),
    }
    # The healthy host passes every check with the config the role writes (the defaults), so
    # the passing gate skips nothing: the agent itself confirms it first.
    from tests.conftest import run_cli

    # An empty config file (the built-in defaults): configs are read only as regular files, so
    # /dev/null is refused like any device.
    empty = work / "empty-config.yaml"
    empty.write_text("")
    gaps = run_cli(["check", "--format", "json", "--config", str(empty), "--bundle", str(HEALTHY)]).json()["gate"]["blocking"]
    assert gaps == [], f"{HEALTHY.name} no longer passes {gaps}"
    base["gpu_node_agent_gate_skip"] = gaps
    runs = [harness.playbook(work / "run", base) for _ in range(2)]
    return {"work": work, "prefix": prefix, "vars": base, "runs": runs, "gaps": gaps,
            "wheelhouse": wheelhouse}


def test_converge_then_second_converge_changes_nothing(converged):
    first, second = converged["runs"]
    assert first.rc == 0, first.output
    assert first.stats["failures"] == 0 and first.stats["changed"] > 0
    assert second.rc == 0, second.output
    changed = [t["task"] for t in second.record["tasks"] if t["changed"]]
    assert second.stats["changed"] == 0, f"not idempotent: {changed}"
    assert second.stats["failures"] == 0 and second.stats["ok"] > 0


def test_gate_passes_on_the_healthy_host_and_the_service_phase_follows(converged):
    run = converged["runs"][0]
    gate = run.task("Gate | run gpu-node-agent check")
    assert gate["status"] == "ok" and gate["rc"] == 0
    assert gate["cmd"][gate["cmd"].index("--bundle") + 1] == str(HEALTHY)
    assert run.task("Gate | stop the play")["status"] == "skipped"
    names = [t["task"] for t in run.record["tasks"]]
    assert names.index("gpu_node_agent : Gate | open") < names.index(
        "gpu_node_agent : Service | install the unit with the venv's command")


def test_testinfra_verifies_the_converged_host(converged, unit_src):
    import testinfra

    host = testinfra.get_host("local://")
    verify(host, str(converged["prefix"]), "dra", str(unit_src))


def test_service_state_is_asserted_only_where_systemd_runs_it(converged):
    import testinfra

    host = testinfra.get_host("local://")
    run = converged["runs"][0]
    start = run.task("Service | enable and start gpu-node-agent")
    pid1 = host.file("/proc/1/comm").content_string.strip()
    # A prefix is an image, never a running system: the role must skip the start, say why,
    # and not pretend. (With systemd as PID 1 and no prefix, the service would be asserted
    # running here; this machine's PID 1 is printed so the branch taken is visible.)
    print(f"PID 1 is {pid1!r}; root prefix {converged['prefix']}")
    assert start["status"] == "skipped"
    note = run.task("Service | not managed here")
    assert str(converged["prefix"]) in note["msg"] and "not enabled or started" in note["msg"]
    if pid1 == "systemd" and not converged["vars"]["gpu_node_agent_root_prefix"]:
        assert host.service("gpu-node-agent").is_running


def test_check_mode_on_a_fresh_host_writes_nothing(converged):
    fresh = converged["work"] / "fresh-root"
    fresh.mkdir()
    before = harness.snapshot(fresh)
    run = harness.playbook(converged["work"] / "run-check",
                           {**converged["vars"], "gpu_node_agent_root_prefix": str(fresh)},
                           "--check", "--diff")
    assert run.rc == 0, run.output
    assert run.stats["changed"] > 0  # it reports what it would do ...
    assert harness.snapshot(fresh) == before  # ... and does none of it
    assert "not run" in run.task("Gate | not run")["msg"]


def test_check_mode_diff_on_a_converged_host_shows_the_change_and_keeps_the_file(converged):
    prefix = converged["prefix"]
    before = harness.snapshot(prefix)
    run = harness.playbook(converged["work"] / "run-diff",
                           {**converged["vars"], "gpu_node_agent_allocation_path": "device-plugin"},
                           "--check", "--diff", "--tags", "configure")
    assert run.rc == 0, run.output
    task = run.task("Configure | write config.yaml")
    assert task["changed"]
    after_text = task["diff"][0]["after"] if isinstance(task["diff"], list) else task["diff"]["after"]
    assert "allocation_path: device-plugin" in after_text
    assert harness.snapshot(prefix) == before


def test_a_config_the_agent_rejects_never_replaces_the_old_one(converged):
    config = converged["prefix"] / CONFIG.lstrip("/")
    before = config.read_bytes()
    run = harness.playbook(converged["work"] / "run-invalid",
                           {**converged["vars"], "gpu_node_agent_config_extra": {"bogus_key": 1}},
                           "--tags", "configure")
    assert run.rc != 0
    failed = run.task("Configure | write config.yaml")
    assert failed["status"] == "failed" and "failed to validate" in failed["msg"]
    assert config.read_bytes() == before


def test_gate_failure_stops_the_play_with_the_blocking_checks_and_fixes(converged):
    prefix = str(converged["prefix"])
    run = harness.playbook(converged["work"] / "run-fail",
                           {**converged["vars"], "gpu_node_agent_gate_bundle": str(NO_DRIVER),
                            "gpu_node_agent_gate_skip": []},
                           "--tags", "gate")
    assert run.rc != 0
    failed = run.task("Gate | stop the play")
    assert failed["status"] == "failed"
    lines: List[str] = failed["msg"].splitlines()
    assert not any(line.lstrip().startswith(("{", "[")) for line in lines)  # not a JSON dump
    oracle = agent_gate(prefix + BIN, prefix + CONFIG, NO_DRIVER)
    assert "driver-loaded" in oracle["gate"]["blocking"]  # the fixture's point
    assert "CLOSED" in lines[0] and ", ".join(oracle["gate"]["blocking"]) in lines[0]
    for check in oracle["checks"]:
        if check["id"] in oracle["gate"]["blocking"]:
            assert f"{check['id']} [{check['status']}]: {check['summary']}" in lines
            assert f"  fix: {check['remediation']}" in lines
    assert "Service" not in " ".join(t["task"] for t in run.record["tasks"])
    # The console shows the same lines, as lines (not one escaped string).
    assert "\ndriver-loaded [fail]: " in run.output


def test_argument_specs_reject_a_bad_variable(converged):
    run = harness.playbook(converged["work"] / "run-bad",
                           {**converged["vars"], "gpu_node_agent_allocation_path": "gpu-magic",
                            "gpu_node_agent_gate_timeout": "soon"})
    assert run.rc != 0
    assert "gpu_node_agent_allocation_path" in run.output and "gpu-magic" in run.output
    assert "must be one of" in run.output
    assert "gpu_node_agent_gate_timeout" in run.output
    assert not any(t["task"].startswith("gpu_node_agent : Install") for t in run.record["tasks"])


def test_ansible_lint_production_profile_passes():
    if not harness.tool("ansible-lint").exists():
        pytest.skip(f"{harness.tool('ansible-lint')} missing: run .ci/setup.d/70-ansible.sh")
    proc = subprocess.run([str(harness.tool("ansible-lint")), "--offline", "--nocolor",
                           "--profile", "production", "ansible/"],
                          cwd=str(harness.REPO), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout
    assert "Profile 'production' was required, and it passed" in proc.stdout


def _toml(text: str) -> Dict[str, Any]:
    try:
        import tomllib  # type: ignore[import-not-found]
    except ImportError:  # Python < 3.11
        import tomli as tomllib  # type: ignore[no-redef]
    return tomllib.loads(text)


def _containerd_dump(toml_text: str, work: Path) -> Dict[str, Any]:
    """containerd's own reading of the CRI section (`config dump` needs no daemon)."""
    binary = component("containerd-1.6")  # Debian's, unpacked by .ci/setup.d/30-containerd.sh
    cfg = work / "containerd-from-nodeconfig.toml"
    cfg.write_text(toml_text)
    proc = subprocess.run([binary, "--config", str(cfg), "config", "dump"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return _toml(proc.stdout)


def test_nodeadm_gates_around_init_then_starts_the_service(converged):
    import yaml

    work, prefix = converged["work"] / "nodeadm", converged["prefix"]
    work.mkdir()
    log = work / "nodeadm.log"
    fake = work / "nodeadm"
    # Stands in for nodeadm: records its arguments and, like a first join, writes the kubelet's
    # kubeconfig (the role's "has this node joined" marker) inside the prefix.
    fake.write_text(f"#!/bin/sh\necho \"$@\" >> {log}\n"
                    f"mkdir -p {prefix}/var/lib/kubelet && touch {prefix}/var/lib/kubelet/kubeconfig\n")
    fake.chmod(0o755)
    extra = {**converged["vars"], "gpu_node_agent_nodeadm": True,
             "gpu_node_agent_nodeadm_containerd_config": True,
             "gpu_node_agent_nodeadm_command": str(fake)}
    run = harness.playbook(work / "run", extra, "--tags", "nodeadm,service")
    assert run.rc == 0, run.output

    names = [(t["task"].split(" : ", 1)[1], t) for t in run.record["tasks"] if t["status"] != "skipped"]
    order = [n for n, _ in names]
    gates = [t for n, t in names if n == "Gate | run gpu-node-agent check"]
    assert len(gates) == 2, order
    pre, post = gates
    i_pre = next(i for i, (_, t) in enumerate(names) if t is pre)
    i_init = order.index("Nodeadm | nodeadm init")
    i_post = next(i for i, (_, t) in enumerate(names) if t is post)
    i_unit = order.index("Service | install the unit with the venv's command")
    assert i_pre < order.index("Nodeadm | write the NodeConfig snippet with the NVIDIA runtime") < i_init
    assert i_init < i_post < i_unit

    known = subprocess.run([str(prefix) + BIN, "explain"], stdout=subprocess.PIPE, text=True,
                           check=True).stdout.split()
    pre_only = {"containerd-nvidia-runtime", "containerd-cdi", "runtimeclass-handler",
                "gpu-workload"} & set(known)
    gaps = set(converged["gaps"])

    def skip_of(cmd: List[str]) -> set:
        return set(cmd[cmd.index("--skip") + 1].split(",")) if "--skip" in cmd else set()

    assert skip_of(pre["cmd"]) == gaps | pre_only
    assert skip_of(post["cmd"]) == gaps
    assert log.read_text().split() == ["init", "--config-source", "file:///etc/eks/nodeadm.d/"]

    snippet = prefix / "etc/eks/nodeadm.d/90-gpu-node-agent.yaml"
    docs = [d for d in yaml.safe_load_all(snippet.read_text()) if d]
    assert len(docs) == 1 and docs[0]["kind"] == "NodeConfig"
    assert docs[0]["apiVersion"] == "node.eks.aws/v1alpha1" and list(docs[0]["spec"]) == ["containerd"]
    section = docs[0]["spec"]["containerd"]["config"]
    assert _toml(section)["version"] == 2
    cri = _containerd_dump(section, work)["plugins"]["io.containerd.grpc.v1.cri"]
    nvidia = cri["containerd"]["runtimes"]["nvidia"]
    assert nvidia["runtime_type"] == "io.containerd.runc.v2"
    assert nvidia["options"]["BinaryName"] == "/usr/bin/nvidia-container-runtime"
    assert cri["containerd"]["default_runtime_name"] == "runc" and "runc" in cri["containerd"]["runtimes"]

    again = harness.playbook(work / "run", extra, "--tags", "nodeadm,service")
    assert again.rc == 0 and again.stats["changed"] == 0, again.output
    assert len(log.read_text().splitlines()) == 1  # joined, NodeConfig unchanged: no second init


def test_nodeadm_merge_mode_owns_only_its_own_containerd_config(converged):
    import yaml

    work, prefix = converged["work"] / "nodeadm-merge", converged["prefix"]
    work.mkdir()
    target = prefix / "etc/eks/nodeconfig.yaml"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(harness.HERE / "fixtures" / "nodeconfig.yaml", target)
    extra = {**converged["vars"], "gpu_node_agent_nodeadm": True, "gpu_node_agent_gate": False,
             "gpu_node_agent_nodeadm_init": False,
             "gpu_node_agent_nodeadm_containerd_config": True,
             "gpu_node_agent_nodeadm_config_source": "/etc/eks/nodeconfig.yaml",
             "gpu_node_agent_nodeadm_nodeconfig_file": "/etc/eks/nodeconfig.yaml"}
    run = harness.playbook(work / "run", extra, "--tags", "nodeadm")
    assert run.rc == 0, run.output
    merged = yaml.safe_load(target.read_text())
    original = yaml.safe_load((harness.HERE / "fixtures" / "nodeconfig.yaml").read_text())
    assert merged["spec"]["hybrid"] == original["spec"]["hybrid"]
    assert merged["spec"]["cluster"] == original["spec"]["cluster"]
    runtimes = _toml(merged["spec"]["containerd"]["config"])["plugins"]["io.containerd.grpc.v1.cri"]
    assert runtimes["containerd"]["runtimes"]["nvidia"]["runtime_type"] == "io.containerd.runc.v2"
    assert target.stat().st_mode & 0o777 == 0o600

    # A containerd config the operator wrote is not the role's to replace: the play stops.
    merged["spec"]["containerd"]["config"] = '[plugins."io.containerd.grpc.v1.cri".containerd]\n'
    target.write_text(yaml.safe_dump(merged))
    before = target.read_text()
    refused = harness.playbook(work / "run", extra, "--tags", "nodeadm")
    assert refused.rc != 0
    assert "already sets spec.containerd.config" in refused.task("NodeConfig's containerd config")["msg"]
    assert target.read_text() == before


def test_check_mode_on_the_converged_host_reports_nothing_to_do(converged):
    prefix = converged["prefix"]
    before = harness.snapshot(prefix)
    run = harness.playbook(converged["work"] / "run-check-again", converged["vars"], "--check", "--diff")
    assert run.rc == 0, run.output
    assert run.stats["changed"] == 0, [t["task"] for t in run.record["tasks"] if t["changed"]]
    assert run.task("Gate | run gpu-node-agent check")["rc"] == 0  # the gate still ran
    assert harness.snapshot(prefix) == before


def test_preflight_refuses_a_package_install_into_a_prefix(converged, tmp_path):
    deb = tmp_path / "gpu-node-agent_0.1.0_amd64.deb"
    deb.write_bytes(b"!<arch>\n")  # never opened: preflight stops the play first
    run = harness.playbook(converged["work"] / "run-pkg",
                           {**converged["vars"], "gpu_node_agent_package_file": str(deb)})
    assert run.rc != 0
    failed = run.task("Preflight | a package install")
    assert failed["status"] == "failed"
    assert "cannot install into a prefix" in failed["msg"]
    assert not (converged["prefix"] / "var/cache/gpu-node-agent").exists()
