"""imex (checks/fabric/imex.py) on its fixture bundles (tests/fixtures/bundles/imex-*) and on
hand-made hosts. Expected values come from the bundles' own inputs (tests/fixtures/families/
imex.py: clique ids 7 and 9, channel0 at 234:0, the stale major 511, the systemctl answers)
and from the sources the module cites: NVIDIA's fix for the conflict is
`systemctl disable --now nvidia-imex && systemctl mask nvidia-imex` (GPU Operator docs, DRA
driver ComputeDomain prerequisites)."""
from typing import Any, Dict, Optional

import pytest

from agent.cli_common import resolve_policy
from agent.config import parse_config
from agent.engine import Engine
from agent.host.bundle import load_bundle
from agent.model import PATHS
from agent.report import evaluate_gate
from checks.fabric.imex import IMEX
from tests.conftest import BUNDLES

FIX = "systemctl disable --now nvidia-imex && systemctl mask nvidia-imex"


def run(name: str, config: str = "", path: str = "dra"):
    """The imex result on bundle ``name`` under ``config`` (YAML text), as the engine makes it."""
    cfg = parse_config(config, "test-config") if config else parse_config("{}", "test-config")
    policy = resolve_policy(cfg, None, path)
    loaded = load_bundle(str(BUNDLES / name))
    try:
        (result,) = Engine([IMEX]).run(loaded.host, policy)
    finally:
        loaded.close()
    return result


def test_present_on_a_compute_domains_host_passes_with_the_facts():
    r = run("imex-present")
    assert (r.status, r.code) == ("pass", None)
    assert r.summary == ("ComputeDomains host: nvidia-imex masked; 1 IMEX channel node(s); "
                         "fabric clique id 7 on 4 GPU(s)")
    assert r.details["compute_domains"] is True
    assert r.details["service"] == {"active": "inactive", "enabled": "masked"}
    assert r.details["channels"] == ["channel0 234:0"]
    assert r.details["clique_ids"] == {"0": 7, "1": 7, "2": 7, "3": 7}


def test_absent_is_not_applicable():
    r = run("imex-absent")
    assert (r.status, r.skip) == ("skip", "not-applicable")
    assert r.summary == ("no IMEX on this host: no nvidia-imex unit; no IMEX channel node; "
                         "no GPU in a completed NVLink fabric")


def test_a_host_service_without_compute_domains_is_host_imex_and_passes():
    r = run("imex-host-service")
    assert r.status == "pass"
    assert r.summary.startswith("host IMEX: nvidia-imex active, enabled;")
    assert r.details["compute_domains"] is False


def test_conflict_fails_with_nvidias_fix_and_closes_every_gate():
    r = run("imex-conflict")
    assert (r.status, r.code) == ("fail", "host-imex-conflict")
    assert r.remediation == FIX
    assert "compute-domain.nvidia.com-reg.sock" in r.summary
    for path in PATHS:
        gate = evaluate_gate([r], path)
        assert (gate.open, gate.blocking) == (False, ("imex",)), path


def test_conflict_under_a_warn_policy_is_reported_and_keeps_the_gate_open():
    r = run("imex-conflict", "policy:\n  imex:\n    host_service_conflict: warn\n")
    assert (r.status, r.code) == ("warn", "host-imex-conflict")
    assert evaluate_gate([r], "dra").open
    assert not evaluate_gate([r], "dra", strict=True).open


def test_pinned_to_policy_version_1_the_check_is_skipped():
    r = run("imex-policy-v1", "policy_version: 1\n")
    assert (r.status, r.skip) == ("skip", "not-applicable")
    assert "policy version 2" in r.summary
    assert evaluate_gate([r], "dra").open


@pytest.mark.parametrize("name, code, needles", [
    ("imex-clique-mismatch", "clique-id-mismatch", ("clique 7: GPU 0, 1; clique 9: GPU 2, 3",)),
    ("imex-channel-node-mismatch", "channel-node-mismatch",
     ("channel0 has major 511, /proc/devices says 234",)),
    ("imex-service-not-recorded", "service-state-unknown",
     ("nvidia-imex state not recorded (`systemctl is-active/is-enabled nvidia-imex`)",
      "cannot be ruled out")),
])
def test_each_warning_names_what_it_found_and_keeps_the_gate_open(name, code, needles):
    r = run(name)
    assert (r.status, r.code) == ("warn", code)
    for needle in needles:
        assert needle in r.summary
    assert evaluate_gate([r], "dra").open


def test_config_overrides_the_plugin_evidence_both_ways():
    # compute_domains false: the registered plugin does not make the running service a conflict.
    off = run("imex-conflict", "imex:\n  compute_domains: false\n")
    assert off.status == "pass" and off.summary.startswith("host IMEX:")
    # compute_domains true: a host validated before it joins (no plugin yet) is held to it.
    on = run("imex-host-service", "imex:\n  compute_domains: true\n")
    assert (on.status, on.code) == ("fail", "host-imex-conflict")
    assert on.details["compute_domains_evidence"] == "config imex.compute_domains: true"


def test_the_config_key_is_validated():
    from agent.errors import ConfigError

    with pytest.raises(ConfigError, match="imex.compute_domains"):
        parse_config("imex:\n  compute_domains: sometimes\n", "c.yaml")
    with pytest.raises(ConfigError, match="imex.nope"):
        parse_config("imex:\n  nope: 1\n", "c.yaml")


# -- hand-made hosts: the service answers systemctl(1) can give ---------------------------

class Host:
    """The HostView calls imex makes, answered from dicts."""

    def __init__(self, commands: Dict[str, Any], dev_nodes: Any = None,
                 proc_devices: Optional[str] = None, sockets=(), snap: Any = None) -> None:
        self.commands, self.nodes, self.proc = commands, dev_nodes, proc_devices
        self.sockets, self.snap = list(sockets), snap

    def run(self, argv, timeout=10.0):
        from agent.hostview import CommandResult

        answer = self.commands.get(argv[1])
        if answer is None:
            return CommandResult(tuple(argv), -1, "", "", not_recorded=True)
        rc, out, err = answer
        return CommandResult(tuple(argv), rc, out, err, timed_out=rc == -9)

    def fact(self, name):
        return self.nodes if name == "dev_nodes" else None

    def read_text_or_none(self, path):
        return self.proc if path == "/proc/devices" else None

    def glob(self, pattern):
        return self.sockets

    def gpus(self):
        return self.snap


def judge(host: Host, config: str = ""):
    cfg = parse_config(config or "{}", "c")
    return IMEX.run(host, resolve_policy(cfg, None, "dra"))


REG = ["/var/lib/kubelet/plugins_registry/compute-domain.nvidia.com-reg.sock"]


@pytest.mark.parametrize("answer, enabled", [
    ((4, "not-found\n", ""), "not-found"),  # systemd with the not-found state
    ((1, "", "Failed to get unit file state for nvidia-imex.service: No such file or "
      "directory\n"), "not-found"),  # systemd 252
    ((127, "", "systemctl: not found"), "not-found"),  # no systemd at all
])
def test_a_missing_unit_in_each_form_is_absent(answer, enabled):
    out = judge(Host({"is-active": (3, "inactive\n", ""), "is-enabled": answer}, dev_nodes=[]))
    assert out.details["service"]["enabled"] == enabled
    assert (out.status, out.skip) == ("skip", "not-applicable")


@pytest.mark.parametrize("active, enabled, status", [
    ("active", "disabled", "fail"),  # started by hand: running now
    ("inactive", "enabled", "fail"),  # stopped, but starts at the next boot
    ("activating", "enabled-runtime", "fail"),
    ("inactive", "disabled", "pass"),  # disabled and stopped: no conflict (masking is advice)
    ("failed", "masked", "pass"),
])
def test_what_is_a_conflict_on_a_compute_domains_host(active, enabled, status):
    host = Host({"is-active": (0, active + "\n", ""), "is-enabled": (0, enabled + "\n", "")},
                dev_nodes=[], sockets=REG)
    assert judge(host).status == status


def test_a_garbage_answer_is_not_a_pass_and_not_a_gate():
    host = Host({"is-active": (0, "\x00garbage\n", ""), "is-enabled": (-9, "", "")},
                dev_nodes="garbage", sockets=REG)
    out = judge(host)
    assert (out.status, out.code) == ("warn", "service-state-unknown")
    assert "timed out" in out.summary and "answered" in out.summary


def test_nothing_captured_is_input_missing():
    out = judge(Host({}))
    assert (out.status, out.skip) == ("skip", "input-missing")


def test_channel_checks_major_from_the_character_section_and_minor():
    from checks.fabric.imex import channel_major

    proc = ("Character devices:\n195 nvidia\n240 nvidia-caps-imex-channels\n\n"
            "Block devices:\n241 nvidia-caps-imex-channels\n")
    assert channel_major(proc) == 240
    assert channel_major("Block devices:\n241 nvidia-caps-imex-channels\n") is None
    nodes = [{"path": "/dev/nvidia-caps-imex-channels/channel1", "major": 240, "minor": 0}]
    host = Host({"is-active": (3, "inactive\n", ""), "is-enabled": (1, "masked\n", "")},
                dev_nodes=nodes, proc_devices=proc)
    out = judge(host)
    assert (out.status, out.code) == ("warn", "channel-node-mismatch")
    assert "channel1 has minor 0, not 1" in out.summary
    # No nvidia-caps-imex-channels in a /proc/devices that was read: the node is stale.
    host.proc = "Character devices:\n195 nvidia\n"
    host.nodes = [{"path": "/dev/nvidia-caps-imex-channels/channel0", "major": 240, "minor": 0}]
    assert "lists no nvidia-caps-imex-channels" in judge(host).summary


def test_clique_ids_count_only_gpus_whose_registration_completed():
    def gpu(i, state, clique):
        return {"index": i, "fabric": {"state": state, "status": "success", "status_code": 0,
                                       "clique_id": clique}}
    snap = {"schema_version": 1, "source": "nvml", "captured_at": "x", "error": None,
            "gpus": [gpu(0, "completed", 5), gpu(1, "completed", 5), gpu(2, "in_progress", 0)]}
    host = Host({"is-active": (3, "inactive\n", ""), "is-enabled": (1, "masked\n", "")},
                dev_nodes=[], snap=snap)
    out = judge(host)
    assert out.status == "pass"
    assert out.details["clique_ids"] == {"0": 5, "1": 5}
    snap["gpus"][2]["fabric"]["state"] = "completed"
    out = judge(host)
    assert (out.status, out.code) == ("warn", "clique-id-mismatch")
    assert "clique 0: GPU 2; clique 5: GPU 0, 1" in out.summary


def test_a_compute_domains_socket_alone_is_missing_input_not_a_pass():
    # The plugin's registration socket says ComputeDomains; with no systemctl (rc 127), no
    # dev_nodes and no snapshot nothing about IMEX itself was seen: not a pass.
    from agent.hostview import CommandResult
    from checks.fabric.imex import IMEX
    from checks.policy import ResolvedPolicy, load_policy

    class Bare:
        def run(self, argv, timeout=10.0):
            return CommandResult(tuple(argv), 127)

        def glob(self, pattern):
            return ["/var/lib/kubelet/plugins_registry/compute-domain.nvidia.com-reg.sock"]

        def fact(self, name):
            return None

        def read_text_or_none(self, path):
            return None

        def gpus(self):
            return None

    out = IMEX.run(Bare(), ResolvedPolicy(load_policy(2), "dra"))
    assert (out.status.value, out.skip) == ("skip", "input-missing")
