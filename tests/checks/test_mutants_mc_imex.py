"""imex (checks/fabric/imex.py, checks/fabric/channels.py) on hand-made hosts: the service
answers systemctl(1) can give and the words the summary uses for them, the fabric clique ids
read from a GPU snapshot (docs/gpu-snapshot.md `fabric`; a snapshot whose `error` is set holds
nothing else), the policy and config lookups, and /proc/devices' sections (proc(5): "Character
devices:" then "Block devices:").
"""
from types import SimpleNamespace
from typing import Any, Dict, List, Optional, Tuple

import pytest

from agent.cli_common import resolve_policy
from agent.config import parse_config
from agent.model import Outcome, Status
from checks.fabric.channels import channel_major
from checks.fabric.imex import IMEX, Service, imex_policy, read_cliques, read_service
from checks.fabric.policy import ImexPolicy
from tests.checks.test_imex import Host as ImexHost

REG = ["/var/lib/kubelet/plugins_registry/compute-domain.nvidia.com-reg.sock"]


class FakeHost(ImexHost):
    """test_imex's hand-made host, also recording each command and its deadline."""

    def __init__(self, commands: Dict[str, Tuple[int, str, str]], dev_nodes: Any = None,
                 proc_devices: Optional[str] = None, sockets: Tuple[str, ...] = (),
                 snap: Any = None) -> None:
        super().__init__(commands, dev_nodes, proc_devices, sockets, snap)
        self.calls: List[Tuple[Tuple[str, ...], Any]] = []

    def run(self, argv, timeout=10.0):
        self.calls.append((tuple(argv), timeout))
        return super().run(argv, timeout)


def judge(host: FakeHost, config: str = ""):
    return IMEX.run(host, resolve_policy(parse_config(config or "{}", "c"), None, "dra"))


# -- systemctl answers --------------------------------------------------------------------------
def test_systemctl_is_asked_with_a_ten_second_deadline():
    host = FakeHost({"is-active": (3, "inactive\n", ""), "is-enabled": (1, "disabled\n", "")})
    assert read_service(host) == Service("inactive", "disabled", [])
    assert host.calls == [(("systemctl", "is-active", "nvidia-imex"), 10),
                          (("systemctl", "is-enabled", "nvidia-imex"), 10)]


def test_no_systemctl_is_an_inactive_absent_unit():
    host = FakeHost({"is-active": (127, "", "systemctl: not found"),
                     "is-enabled": (127, "", "systemctl: not found")})
    assert read_service(host) == Service("inactive", "not-found", [])


@pytest.mark.parametrize("active, enabled, unread", [
    # is-active never answers "not-found": "No such file" on its stderr is just unread.
    ((4, "weird\n", "No such file or directory\n"), (1, "disabled\n", ""),
     ["`systemctl is-active nvidia-imex` answered weird"]),
    # a word is-enabled does not give is unread, even when the unit is missing otherwise.
    ((3, "inactive\n", ""), (1, "bogus\n", "No such file or directory\n"),
     ["`systemctl is-enabled nvidia-imex` answered bogus"]),
    # no word at all: the error line is what it answered.
    ((3, "", "Failed to connect to bus: No medium found\n"), (1, "disabled\n", ""),
     ["`systemctl is-active nvidia-imex` answered Failed to connect to bus: No medium found"]),
])
def test_answers_systemctl_does_not_give_are_unread(active, enabled, unread):
    service = read_service(FakeHost({"is-active": active, "is-enabled": enabled}))
    assert service.unread == unread
    assert (service.active is None) == ("is-active" in unread[0])
    assert (service.enabled is None) == ("is-enabled" in unread[0])


def test_unread_states_are_listed_in_the_warning_on_a_compute_domains_host():
    host = FakeHost({"is-active": (3, "weird\n", ""), "is-enabled": (1, "bogus\n", "")},
                    dev_nodes=[], sockets=REG)
    out = judge(host)
    assert (out.status, out.code) == (Status.WARN, "service-state-unknown")
    assert out.summary == (
        f"ComputeDomains host [compute-domain.nvidia.com kubelet plugin registered: {REG[0]}]; "
        "nvidia-imex state not read (`systemctl is-active nvidia-imex` answered weird; "
        "`systemctl is-enabled nvidia-imex` answered bogus): the host service conflict cannot "
        "be ruled out")


def test_service_words_for_each_state():
    assert Service("inactive", "not-found", []).words() == "no nvidia-imex unit"
    assert Service("inactive", "masked-runtime", []).words() == "nvidia-imex masked-runtime"
    assert Service("active", "enabled", []).words() == "nvidia-imex active, enabled"
    assert Service(None, None, []).words() == "nvidia-imex state unknown, file state unknown"


# -- fabric clique ids --------------------------------------------------------------------------
def gpu(i: int, state: str = "completed", status: str = "success", clique: Any = 5) -> Dict:
    return {"index": i, "fabric": {"state": state, "status": status, "status_code": 0,
                                   "clique_id": clique}}


def snap(*gpus: Dict, **over: Any) -> Dict:
    s = {"schema_version": 1, "source": "nvml", "captured_at": "x", "error": None,
         "gpus": list(gpus)}
    s.update(over)
    return s


def cliques_of(s: Any):
    return read_cliques(FakeHost({}, snap=s))


def test_clique_ids_of_completed_registrations_only():
    assert cliques_of(snap(gpu(0, "in_progress"), gpu(1), gpu(2, status="failure", clique=7),
                           gpu(3, clique=None), gpu(4, clique=True), gpu(5, clique="9"),
                           {"index": 6, "fabric": "x"}, gpu(7))) == (
        {1: 5, 7: 5}, "fabric clique id 5 on 2 GPU(s)")


def test_several_clique_ids_are_listed_in_order():
    assert cliques_of(snap(gpu(0, clique=9), gpu(1, clique=5), gpu(2, clique=9))) == (
        {0: 9, 1: 5, 2: 9}, "fabric clique id 5, 9 on 3 GPU(s)")


def test_no_completed_gpu():
    assert cliques_of(snap(gpu(0, "not_started"))) == ({}, "no GPU in a completed NVLink fabric")


@pytest.mark.parametrize("s", [
    None,
    snap(gpu(0), error={"kind": "nvml-init", "message": "NVML not loaded"}),  # error set
    snap(gpu(0), device_count="one"),  # a structural problem, no error
])
def test_no_usable_snapshot(s):
    assert cliques_of(s) == (None, "no usable GPU snapshot")


def test_no_usable_snapshot_in_the_missing_input_summary():
    host = FakeHost({}, snap=snap(gpu(0), error={"kind": "x", "message": "y"}))
    out = judge(host)
    assert (out.status, out.skip) == (Status.SKIP, "input-missing")
    assert out.summary == ("IMEX inputs not captured: nvidia-imex state not recorded "
                           "(`systemctl is-active/is-enabled nvidia-imex`); IMEX channel nodes "
                           "not captured; no usable GPU snapshot")


# -- policy and config --------------------------------------------------------------------------
def test_imex_policy_defaults_for_objects_without_one():
    no_policy: Any = SimpleNamespace()
    no_section: Any = SimpleNamespace(policy=SimpleNamespace())
    not_a_section: Any = SimpleNamespace(policy=SimpleNamespace(imex="warn"))
    for policy in (no_policy, no_section, not_a_section):
        assert imex_policy(policy) == ImexPolicy()


# -- /proc/devices ------------------------------------------------------------------------------
def test_channel_major_only_under_the_character_devices_header():
    assert channel_major("240 nvidia-caps-imex-channels\n") is None  # before any header
    assert channel_major("Character devices:\n240 nvidia-caps-imex-channels\n") == 240
    assert channel_major(None) is None


# -- the verdict and its details ----------------------------------------------------------------
PROC = "Character devices:\n195 nvidia\n234 nvidia-caps-imex-channels\n\nBlock devices:\n8 sd\n"
NO_CD = "no compute-domain.nvidia.com kubelet plugin registration"
CD = f"compute-domain.nvidia.com kubelet plugin registered: {REG[0]}"


def node(n: int, major: int = 234, minor: Optional[int] = None) -> Dict[str, Any]:
    return {"path": f"/dev/nvidia-caps-imex-channels/channel{n}", "major": major,
            "minor": n if minor is None else minor}


def details(cd: bool, why: str, active: Optional[str], enabled: Optional[str],
            unread: List[str], channels: Any, cliques: Any) -> Dict[str, Any]:
    return {"compute_domains": cd, "compute_domains_evidence": why,
            "service": {"active": active, "enabled": enabled}, "service_unread": unread,
            "channels": channels, "clique_ids": cliques}


ABSENT = {"is-active": (3, "inactive\n", ""), "is-enabled": (4, "not-found\n", "")}
DISABLED = {"is-active": (3, "inactive\n", ""), "is-enabled": (1, "disabled\n", "")}


def test_channel_nodes_alone_pass_as_imex():
    nodes = ["junk", {"path": 5}, {"path": "/dev/nvidia0", "major": 195, "minor": 0}, node(0)]
    host = FakeHost(ABSENT, dev_nodes=nodes, proc_devices=PROC, snap=snap(gpu(0, "not_started")))
    out = judge(host)
    assert out == Outcome(
        Status.PASS, "IMEX: no nvidia-imex unit; 1 IMEX channel node(s); no GPU in a completed "
        "NVLink fabric",
        details(False, NO_CD, "inactive", "not-found", [], ["channel0 234:0"], {}))


def test_an_installed_service_alone_passes_as_imex():
    out = judge(FakeHost(DISABLED))
    assert out == Outcome(
        Status.PASS, "IMEX: nvidia-imex inactive, disabled; IMEX channel nodes not captured; "
        "no usable GPU snapshot",
        details(False, NO_CD, "inactive", "disabled", [], None, None))


def test_a_compute_domains_host_with_empty_channel_capture_passes():
    out = judge(FakeHost(ABSENT, dev_nodes=[], sockets=REG))
    assert out == Outcome(
        Status.PASS, "ComputeDomains host: no nvidia-imex unit; no IMEX channel node; "
        "no usable GPU snapshot", details(True, CD, "inactive", "not-found", [], [], None))


def test_missing_input_keeps_its_details():
    host = FakeHost({}, snap=snap(gpu(0), error={"kind": "x", "message": "y"}))
    out = judge(host)
    unread = ["`systemctl is-active nvidia-imex` not recorded for this host",
              "`systemctl is-enabled nvidia-imex` not recorded for this host"]
    assert out.details == details(False, NO_CD, None, None, unread, None, None)


def test_unknown_service_state_warning_keeps_its_details():
    host = FakeHost({"is-active": (3, "weird\n", ""), "is-enabled": (1, "disabled\n", "")},
                    dev_nodes=[], sockets=REG)
    out = judge(host)
    assert out.details == details(True, CD, None, "disabled",
                                  ["`systemctl is-active nvidia-imex` answered weird"], [], None)


def test_clique_mismatch_warning_keeps_its_details():
    host = FakeHost(DISABLED, dev_nodes=[], snap=snap(gpu(0, clique=5), gpu(1, clique=7)))
    out = judge(host)
    assert (out.status, out.code) == (Status.WARN, "clique-id-mismatch")
    assert out.summary == ("GPUs of this node report different fabric clique ids (clique 5: "
                           "GPU 0; clique 7: GPU 1); nvidia-imex inactive, disabled")
    assert out.details == details(False, NO_CD, "inactive", "disabled", [], [],
                                  {"0": 5, "1": 7})


def test_channel_mismatch_lists_four_nodes_and_keeps_its_details():
    nodes = [node(n, major=511) for n in range(5)]
    out = judge(FakeHost(DISABLED, dev_nodes=nodes, proc_devices=PROC))
    wrong = [f"/dev/nvidia-caps-imex-channels/channel{n} has major 511, /proc/devices says 234"
             for n in range(4)]
    assert out == Outcome(
        Status.WARN, "IMEX channel node(s) do not match the driver: " + "; ".join(wrong),
        details(False, NO_CD, "inactive", "disabled", [],
                [f"channel{n} 511:{n}" for n in range(5)], None),
        code="channel-node-mismatch")
