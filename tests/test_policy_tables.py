"""Every row of the policy's driver, toolkit, kubelet, OS and gating tables, asserted against an
expectation written here by hand from the public sources, never read from policy_v1.yaml.

A changed number fails a test whose id names the row (``driver-minimum[operator-clusterpolicy]``),
and each row is also checked through the check that uses it (a driver exactly at the minimum
passes, one branch below fails), so a row that the check stopped reading fails too.

Sources (read 2026-11):
- driver minimums: NVIDIA DRA Driver for GPUs, "Prerequisites" (standalone install: driver 565
  or later); GPU Operator 25.10 release notes (DRA through the operator: driver 580 or later);
  device-plugin and ClusterPolicy paths: R535, the oldest long-term support branch NVIDIA's
  "Supported Drivers and CUDA Toolkit Versions" page still listed in 2025.
- branch lifecycle: NVIDIA "Driver Lifecycle" (docs.nvidia.com/datacenter/tesla/drivers/):
  R535 LTSB until June 2026, R570 production branch until February 2026, R580 LTSB until
  August 2028; "all other previous driver branches not listed are end of life".
- toolkit: NVIDIA Container Toolkit v1.18.0 release notes (first release with the
  nvidia-cdi-refresh units the DRA driver relies on).
- kubelet: Kubernetes v1.34 release (DRA GA); 1.34.2 the first patch the DRA driver documents.
- OS: EKS Hybrid Nodes "Prepare operating system" (Ubuntu 22.04/24.04, RHEL 8/9, AL2023) with
  the NVIDIA data center driver's supported distributions; Ubuntu 20.04 deprecated.
"""
import datetime
from typing import Dict, Optional, Tuple

import pytest

from agent.host.bundle import RecordedCommands
from agent.host.seam import Host
from agent.model import CheckResult, Severity, Status
from agent.report import evaluate_gate
from checks.driver.driver_branch import DRIVER_BRANCH
from checks.kubelet_version import KUBELET_VERSION
from checks.policy import ResolvedPolicy, load_policy
from checks.registry import ALL_CHECKS
from checks.toolkit_version import TOOLKIT_VERSION

PATHS = ("device-plugin", "dra", "operator-clusterpolicy", "operator-gpucluster")
# Before R535's end of life (2026-06-30), so "meets the minimum" is a plain pass everywhere.
BEFORE_535_EOL = datetime.date(2026, 1, 15)

# -- driver ---------------------------------------------------------------------------------
EXPECTED_DRIVER_MINIMUM: Dict[str, int] = {
    "device-plugin": 535,
    "dra": 565,
    "operator-clusterpolicy": 535,
    "operator-gpucluster": 580,
}
# branch -> (kind, end of life date or None, listed as ended without a date)
EXPECTED_BRANCHES: Dict[int, Tuple[str, Optional[str], bool]] = {
    470: ("ltsb", None, True),
    525: ("production", None, True),
    535: ("ltsb", "2026-06-30", False),
    545: ("feature", None, True),
    550: ("production", None, True),
    555: ("feature", None, True),
    560: ("feature", None, True),
    565: ("feature", None, True),
    570: ("production", "2026-02-28", False),
    575: ("feature", None, True),
    580: ("ltsb", "2028-08-31", False),
}
EXPECTED_TOOLKIT_MINIMUM: Dict[str, Optional[str]] = {
    "device-plugin": None,
    "dra": "1.18.0",
    "operator-clusterpolicy": None,
    "operator-gpucluster": "1.18.0",
}
EXPECTED_KUBELET_MINIMUM: Dict[str, Optional[str]] = {
    "device-plugin": None,
    "dra": "1.34.2",
    "operator-clusterpolicy": None,
    "operator-gpucluster": "1.34.2",
}
EXPECTED_OS_SUPPORTED = {("ubuntu", ("22.04", "24.04")), ("rhel", ("8", "9")), ("amzn", ("2023",))}
EXPECTED_OS_DEPRECATED = {("ubuntu", ("20.04",))}

# -- gating matrix: check id -> (severity, paths it gates) ----------------------------------
ALL = frozenset(PATHS)
DP_CP = frozenset({"device-plugin", "operator-clusterpolicy"})
DRA_GC = frozenset({"dra", "operator-gpucluster"})
OPS = frozenset({"operator-clusterpolicy", "operator-gpucluster"})
C, W = "critical", "warning"
EXPECTED_GATING: Dict[str, Tuple[str, frozenset]] = {
    "os-supported": (W, ALL),
    "driver-loaded": (C, ALL),
    "driver-branch": (C, ALL),
    "driver-open-module": (C, ALL),
    "driver-library-match": (C, ALL),
    "nvml-responsive": (C, ALL),
    "gpu-count": (C, ALL),
    "gpu-sku": (C, ALL),
    "driver-persistence": (W, ALL),
    "fabric-manager": (C, ALL),
    # Closes a gate only on a host IMEX conflict; everything else it finds warns (docs/paths.md).
    "imex": (C, ALL),
    "toolkit-version": (C, ALL),
    # The runtime's own config against the device plugin's device-list strategy: only where
    # the device plugin hands GPUs to the nvidia runtime.
    "toolkit-runtime-config": (C, DP_CP),
    # The GPU Operator's ownership of driver and toolkit: only where the operator runs.
    "gpu-operator": (C, OPS),
    "containerd-nvidia-runtime": (C, DP_CP),
    "containerd-cdi": (C, DRA_GC),
    # The nvidia runtime's cgroup driver: only where pods run through that runtime.
    "containerd-cgroup-driver": (C, DP_CP),
    "cdi-spec-current": (C, ALL),
    "kubelet-version": (C, DRA_GC),
    "allocation-owner": (C, ALL),
    "gpu-capacity": (C, ALL),
    "registration-labels": (C, ALL),
    "mig-mode": (C, ALL),
    "mig-geometry": (C, ALL),
    "runtimeclass-handler": (C, DP_CP),
    # Opt-in per path (workload.paths); where it is not asked for it is skip.
    "gpu-workload": (C, ALL),
    "time-sync": (C, ALL),
    "gpu-xid": (C, ALL),
    "gpu-ecc": (C, ALL),
    "gpu-row-remap": (C, ALL),
    "gpu-thermal": (W, ALL),
    "gpu-pcie-link": (W, ALL),
    "gpu-nvlink": (W, ALL),
}


def _policy():
    return load_policy(1)


def _resolved(path: str, today: datetime.date = BEFORE_535_EOL) -> ResolvedPolicy:
    return ResolvedPolicy(_policy(), path, today=today)


def _driver_host(tmp_path, version: str) -> Host:
    proc = tmp_path / "root" / "proc" / "driver" / "nvidia"
    proc.mkdir(parents=True)
    # The proprietary module's line (NVIDIA driver README, /proc/driver/nvidia/version).
    (proc / "version").write_text(
        f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {version}  Tue Jun 23 00:00:00 UTC 2026\n"
        "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n"
    )
    return Host(tmp_path / "root")


def _commands_host(tmp_path, argv, stdout: str, rc: int = 0) -> Host:
    (tmp_path / "root").mkdir(parents=True, exist_ok=True)
    records = [{"argv": list(argv), "rc": rc, "stdout": stdout, "stderr": ""}]
    return Host(tmp_path / "root", commands=RecordedCommands(records, "test"))


# -- driver rows ----------------------------------------------------------------------------
@pytest.mark.parametrize("path", PATHS, ids=[f"driver-minimum[{p}]" for p in PATHS])
def test_driver_minimum_row(path):
    """Catches the mutations 'operator-clusterpolicy driver minimum 535 -> 580' and
    'device-plugin driver minimum 535 -> 550': each row is compared with the sources."""
    assert _policy().driver.minimum_branch.get(path) == EXPECTED_DRIVER_MINIMUM[path], (
        f"policy row driver.minimum_branch.{path} changed"
    )


def test_driver_minimum_table_has_exactly_the_four_paths():
    assert set(_policy().driver.minimum_branch) == set(EXPECTED_DRIVER_MINIMUM)


@pytest.mark.parametrize("path", PATHS, ids=[f"driver-at-minimum-passes[{p}]" for p in PATHS])
def test_driver_exactly_at_the_minimum_passes(tmp_path, path):
    """Mutation 'operator-clusterpolicy driver minimum 535 -> 580' (and 'device-plugin
    535 -> 550'): an R535 driver on those paths must keep passing driver-branch."""
    minimum = EXPECTED_DRIVER_MINIMUM[path]
    out = DRIVER_BRANCH.run(_driver_host(tmp_path, f"{minimum}.104.05"), _resolved(path))
    assert out.status == Status.PASS, out.summary
    assert f"meets the {path} minimum R{minimum}" in out.summary


@pytest.mark.parametrize("path", PATHS, ids=[f"driver-below-minimum-fails[{p}]" for p in PATHS])
def test_driver_one_branch_below_the_minimum_fails(tmp_path, path):
    minimum = EXPECTED_DRIVER_MINIMUM[path]
    out = DRIVER_BRANCH.run(_driver_host(tmp_path, f"{minimum - 1}.10.01"), _resolved(path))
    assert out.status == Status.FAIL, out.summary
    assert f"below the {path} minimum R{minimum}" in out.summary
    assert out.details["minimum_branch"] == minimum


@pytest.mark.parametrize("branch", sorted(EXPECTED_BRANCHES), ids=[f"branch-lifecycle[R{b}]" for b in sorted(EXPECTED_BRANCHES)])
def test_branch_lifecycle_row(branch):
    info = _policy().driver.branches.get(branch)
    assert info is not None, f"branch R{branch} missing from the lifecycle table"
    kind, eol, ended = EXPECTED_BRANCHES[branch]
    assert info.kind == kind
    assert (str(info.end_of_life) if info.end_of_life else None) == eol
    assert info.ended is ended


def test_branch_lifecycle_table_has_no_extra_rows():
    assert set(_policy().driver.branches) == set(EXPECTED_BRANCHES)


@pytest.mark.parametrize("branch, day, past", [
    (535, datetime.date(2026, 6, 30), False),  # the last day is still supported
    (535, datetime.date(2026, 7, 1), True),
    (570, datetime.date(2026, 2, 28), False),
    (570, datetime.date(2026, 3, 1), True),
    (580, datetime.date(2028, 8, 31), False),
    (580, datetime.date(2028, 9, 1), True),
    (565, datetime.date(2020, 1, 1), True),  # listed as ended: past whatever the date
])
def test_end_of_life_boundaries(branch, day, past):
    assert _policy().driver.branches[branch].is_past_end_of_life(day) is past


def test_driver_side_settings():
    dp = _policy().driver
    assert dp.allowed_branches == []
    assert dp.warn_past_end_of_life_paths == ["device-plugin"]
    assert dp.managed_by_operator is False


@pytest.mark.parametrize("path, status", [
    ("device-plugin", Status.WARN), ("dra", Status.FAIL), ("operator-clusterpolicy", Status.PASS),
    ("operator-gpucluster", Status.FAIL)])
def test_r535_after_its_end_of_life_warns_only_on_device_plugin(tmp_path, path, status):
    out = DRIVER_BRANCH.run(_driver_host(tmp_path, "535.247.01"),
                            _resolved(path, today=datetime.date(2026, 7, 1)))
    assert out.status == status, out.summary


# -- driver rows, policy version 2 ----------------------------------------------------------
# NVIDIA "Driver Lifecycle": an ended branch gets no fixes on any path, so version 2 warns on
# every path; version 1's single device-plugin row above is unchanged.
@pytest.mark.parametrize("path", PATHS, ids=[f"v2-eol-warns[{p}]" for p in PATHS])
def test_v2_r535_after_its_end_of_life_warns_on_every_path_it_meets(tmp_path, path):
    assert load_policy(2).driver.warn_past_end_of_life_paths == list(PATHS)
    out = DRIVER_BRANCH.run(_driver_host(tmp_path, "535.247.01"),
                            ResolvedPolicy(load_policy(2), path, today=datetime.date(2026, 7, 1)))
    # R535 is below the dra (565) and operator-gpucluster (580) minimums: those still fail.
    expected = Status.FAIL if EXPECTED_DRIVER_MINIMUM[path] > 535 else Status.WARN
    assert out.status == expected, out.summary


def test_v2_keeps_version_1_driver_minimums_and_lifecycle():
    v2 = load_policy(2).driver
    assert v2.minimum_branch == EXPECTED_DRIVER_MINIMUM
    assert set(v2.branches) == set(EXPECTED_BRANCHES)


# Blackwell and Grace Hopper need the open kernel module (NVIDIA Technical Blog, "NVIDIA
# Transitions Fully Towards Open-Source GPU Kernel Modules"); ids from pci.ids (vendor 10de).
EXPECTED_OPEN_MODULE_PCI_IDS = {
    "10de:2901", "10de:2909", "10de:2920", "10de:2941", "10de:29bc",  # GB100/GB102: B100/B200/GB200
    "10de:3182", "10de:31a1", "10de:31c2", "10de:31c3",  # GB110: B300, GB300
    "10de:2342", "10de:2348",  # GH100: GH200
    "10de:2bb5",  # GB202GL: RTX PRO 6000 Blackwell Server Edition
}


def test_open_module_rows_per_version():
    assert load_policy(1).driver.require_open_module.products == []
    assert load_policy(1).driver.require_open_module.pci_device_ids == []
    v2 = load_policy(2).driver.require_open_module
    assert set(v2.pci_device_ids) == EXPECTED_OPEN_MODULE_PCI_IDS
    assert v2.names_product("NVIDIA B200") and v2.names_product("NVIDIA B300 SXM6 AC")
    assert v2.names_product("NVIDIA GH200 480GB")
    # Hopper, Ampere and Turing run either module: none of their names is held to it.
    for name in ("NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA A100-SXM4-80GB", "Tesla T4",
                 "NVIDIA B2000"):
        assert not v2.names_product(name), name


# -- toolkit rows -----------------------------------------------------------------------------
CTK = ("nvidia-ctk", "--version")


def _ctk_output(version: str) -> str:
    # nvidia-ctk --version's first line (NVIDIA Container Toolkit, cmd/nvidia-ctk).
    return f"NVIDIA Container Toolkit CLI version {version}\ncommit: 0000000\n"


@pytest.mark.parametrize("path", PATHS, ids=[f"toolkit-minimum[{p}]" for p in PATHS])
def test_toolkit_minimum_row(path):
    assert _policy().toolkit.minimum_version.get(path) == EXPECTED_TOOLKIT_MINIMUM[path]


def test_toolkit_table_has_exactly_the_four_paths_and_is_not_operator_managed():
    tp = _policy().toolkit
    assert set(tp.minimum_version) == set(EXPECTED_TOOLKIT_MINIMUM)
    assert tp.managed_by_operator is False


@pytest.mark.parametrize("path", PATHS, ids=[f"toolkit-behaviour[{p}]" for p in PATHS])
def test_toolkit_minimum_through_the_check(tmp_path, path):
    minimum = EXPECTED_TOOLKIT_MINIMUM[path]
    at = TOOLKIT_VERSION.run(_commands_host(tmp_path / "a", CTK, _ctk_output(minimum or "1.0.0")),
                             _resolved(path))
    assert at.status == Status.PASS, at.summary
    below = TOOLKIT_VERSION.run(_commands_host(tmp_path / "b", CTK, _ctk_output("1.17.8")),
                                _resolved(path))
    assert below.status == (Status.FAIL if minimum else Status.PASS), below.summary
    if minimum:
        assert f"below {minimum}" in below.summary
    missing = TOOLKIT_VERSION.run(_commands_host(tmp_path / "c", CTK, "", rc=127), _resolved(path))
    assert missing.status == Status.FAIL and "not installed" in missing.summary


# -- kubelet rows ----------------------------------------------------------------------------
KUBELET = ("kubelet", "--version")


@pytest.mark.parametrize("path", PATHS, ids=[f"kubelet-minimum[{p}]" for p in PATHS])
def test_kubelet_minimum_row(path):
    assert _policy().kubelet.minimum_version.get(path) == EXPECTED_KUBELET_MINIMUM[path]


def test_kubelet_table_has_exactly_the_four_paths():
    assert set(_policy().kubelet.minimum_version) == set(EXPECTED_KUBELET_MINIMUM)


@pytest.mark.parametrize("path", PATHS, ids=[f"kubelet-behaviour[{p}]" for p in PATHS])
def test_kubelet_minimum_through_the_check(tmp_path, path):
    minimum = EXPECTED_KUBELET_MINIMUM[path]
    at = KUBELET_VERSION.run(
        _commands_host(tmp_path / "a", KUBELET, f"Kubernetes v{minimum or '1.30.0'}\n"),
        _resolved(path))
    assert at.status == Status.PASS, at.summary
    below = KUBELET_VERSION.run(_commands_host(tmp_path / "b", KUBELET, "Kubernetes v1.34.1\n"),
                                _resolved(path))
    if minimum:
        assert below.status == Status.FAIL and f"below {minimum}" in below.summary
    else:
        assert below.status == Status.PASS and "not gated" in below.summary


# -- OS rows ---------------------------------------------------------------------------------
def test_os_support_matrix_rows():
    os_policy = _policy().os
    assert {(e.id, tuple(e.versions)) for e in os_policy.supported} == EXPECTED_OS_SUPPORTED
    assert {(e.id, tuple(e.versions)) for e in os_policy.deprecated} == EXPECTED_OS_DEPRECATED


def test_policy_version_is_one():
    assert _policy().policy_version == 1


# -- gating matrix ---------------------------------------------------------------------------
# The gates policy version 2 added (docs/paths.md, docs/upgrading.md "Policy version 2"): under a
# config pinned to version 1 each is skip, so pinning keeps 0.1.0's verdicts.
ADDED_IN_POLICY_2 = {"imex", "gpu-operator", "containerd-cgroup-driver", "gpu-capacity",
                     "registration-labels", "mig-geometry", "gpu-sku",
                     "driver-open-module", "toolkit-runtime-config",
                     "gpu-workload"}


def test_exactly_the_version_2_gates_are_marked_since_policy_2():
    assert {c.id for c in ALL_CHECKS if c.since_policy == 2} == ADDED_IN_POLICY_2
    assert {c.since_policy for c in ALL_CHECKS} == {1, 2}


def test_gating_matrix_names_every_registered_check():
    assert [c.id for c in ALL_CHECKS if c.id not in EXPECTED_GATING] == []
    assert sorted(set(EXPECTED_GATING) - {c.id for c in ALL_CHECKS}) == []


@pytest.mark.parametrize("check_id", list(EXPECTED_GATING), ids=[f"gating[{c}]" for c in EXPECTED_GATING])
def test_gating_row(check_id):
    check = next(c for c in ALL_CHECKS if c.id == check_id)
    severity, gates = EXPECTED_GATING[check_id]
    assert check.severity.value == severity
    assert frozenset(check.gates) == gates


def _result(check, status: Status) -> CheckResult:
    return CheckResult(id=check.id, title=check.title, severity=check.severity, status=status,
                       summary="x", remediation="", gates=tuple(check.gates), details={},
                       duration_s=0.0)


@pytest.mark.parametrize("check_id", list(EXPECTED_GATING), ids=[f"gate-closes[{c}]" for c in EXPECTED_GATING])
@pytest.mark.parametrize("status", [Status.FAIL, Status.UNKNOWN, Status.WARN, Status.SKIP])
def test_one_check_closes_exactly_the_gates_the_matrix_says(check_id, status):
    """The gate evaluation itself, per row: a critical check that fails or is unknown closes
    the gates of its paths only; warn closes nothing unless strict; a warning-severity check
    closes a gate only with --strict; skip never closes one."""
    severity, gates = EXPECTED_GATING[check_id]
    results = []
    for check in ALL_CHECKS:
        results.append(_result(check, status if check.id == check_id else Status.PASS))
    for path in PATHS:
        for strict in (False, True):
            gate = evaluate_gate(results, path, strict)
            if path not in gates or status in (Status.SKIP, Status.PASS):
                closes = False
            elif strict:
                closes = status in (Status.WARN, Status.FAIL, Status.UNKNOWN)
            else:
                closes = severity == C and status in (Status.FAIL, Status.UNKNOWN)
            assert gate.open is not closes, (path, strict)
            assert gate.blocking == ((check_id,) if closes else ())
            assert gate.path == path


def test_gate_lists_every_blocking_check_in_report_order():
    failing = {"driver-loaded", "gpu-xid", "containerd-cdi"}
    results = [_result(c, Status.FAIL if c.id in failing else Status.PASS) for c in ALL_CHECKS]
    assert evaluate_gate(results, "dra").blocking == ("driver-loaded", "containerd-cdi", "gpu-xid")
    assert evaluate_gate(results, "device-plugin").blocking == ("driver-loaded", "gpu-xid")


def test_severity_enum_values_are_the_json_contract():
    assert {s.value for s in Severity} == {"critical", "warning"}


@pytest.mark.parametrize("path", PATHS, ids=[f"kubelet-absent[{p}]" for p in PATHS])
def test_kubelet_absent_fails_only_where_the_row_gates(tmp_path, path):
    root = tmp_path / "root"
    root.mkdir()
    records = [{"argv": list(argv), "rc": 127, "stdout": "", "stderr": "not found"}
               for argv in (KUBELET, ("/snap/k8s/current/bin/kubelet", "--version"))]
    out = KUBELET_VERSION.run(Host(root, commands=RecordedCommands(records, "test")),
                              _resolved(path))
    minimum = EXPECTED_KUBELET_MINIMUM[path]
    if minimum:
        assert out.status == Status.FAIL
        assert out.summary == f"kubelet not installed (the {path} path needs >= {minimum})"
    else:
        assert out.status == Status.SKIP
        assert out.summary == f"kubelet not installed (not gated on the {path} path)"


def test_kubelet_details_and_unrecognised_output(tmp_path):
    ok = KUBELET_VERSION.run(_commands_host(tmp_path / "a", KUBELET, "Kubernetes v1.34.3\n"),
                             _resolved("dra"))
    assert ok.summary == "kubelet 1.34.3 >= 1.34.2"
    assert ok.details == {"version": "1.34.3", "binary": "kubelet"}
    low = KUBELET_VERSION.run(_commands_host(tmp_path / "b", KUBELET, "Kubernetes v1.33.5\n"),
                              _resolved("operator-gpucluster"))
    assert low.details == {"version": "1.33.5", "binary": "kubelet", "minimum": "1.34.2"}
    assert low.summary == ("kubelet 1.33.5 is below 1.34.2 required for DRA on the "
                           "operator-gpucluster path")
    odd = KUBELET_VERSION.run(_commands_host(tmp_path / "c", KUBELET, "kubelet: weird\n"),
                              _resolved("dra"))
    assert odd.status == Status.UNKNOWN
    assert odd.summary == "unrecognised `kubelet --version` output: 'kubelet: weird\\n'"
    broken = KUBELET_VERSION.run(_commands_host(tmp_path / "d", KUBELET, "", rc=1),
                                 _resolved("dra"))
    assert broken.status == Status.UNKNOWN
    assert broken.summary.startswith("cannot read the kubelet version: `kubelet --version` exited 1")


def test_kubelet_not_gated_details_and_long_output_cut_at_60(tmp_path):
    free = KUBELET_VERSION.run(_commands_host(tmp_path / "a", KUBELET, "Kubernetes v1.30.1\n"),
                               _resolved("device-plugin"))
    assert free.summary == "kubelet 1.30.1 (not gated on the device-plugin path)"
    assert free.details == {"version": "1.30.1", "binary": "kubelet"}
    noise = "x" * 70
    odd = KUBELET_VERSION.run(_commands_host(tmp_path / "b", KUBELET, noise), _resolved("dra"))
    assert odd.summary == f"unrecognised `kubelet --version` output: {'x' * 60!r}"


def test_resolved_policy_setting_falls_back_to_the_callers_default():
    rp = ResolvedPolicy(_policy(), "dra", settings={"expected_gpus": 8})
    assert rp.setting("expected_gpus", 4) == 8
    assert rp.setting("absent", 4) == 4
    assert rp.setting("absent") is None


def test_xid_overrides_reach_the_policy():
    from checks.xid.policy import load_xid_policy

    xid = load_xid_policy({"codes": {"13": {"class": "ignore"}}})
    assert xid.klass(13) == "ignore" and xid.codes[13].catalog == "RESTART_APP"
    merged = load_policy(1, {"xid": {"default_threshold": {"count": 20}}}).xid
    assert (merged.default_threshold.count, merged.default_threshold.window_s) == (20, 3600)


def test_gate_is_not_strict_unless_asked():
    warn = [_result(c, Status.WARN if c.id == "driver-loaded" else Status.PASS) for c in ALL_CHECKS]
    assert evaluate_gate(warn, "dra").open is True
    assert evaluate_gate(warn, "dra", True).blocking == ("driver-loaded",)


def test_strict_gate_uses_the_checks_verdict_on_that_path():
    """A check decided per path (CheckResult.by_path): its verdict on the gate's path, not
    the report path's, closes or keeps open that gate, strict or not."""
    from agent.model import PathOutcome

    check = next(c for c in ALL_CHECKS if c.id == "driver-branch")
    on_dp = {"device-plugin": PathOutcome(Status.WARN, "past end of life", "")}
    res = CheckResult(id=check.id, title=check.title, severity=check.severity,
                      status=Status.PASS, summary="ok", remediation="", gates=tuple(check.gates),
                      details={}, duration_s=0.0, by_path=on_dp)
    assert evaluate_gate([res], "device-plugin", strict=True).blocking == ("driver-branch",)
    assert evaluate_gate([res], "dra", strict=True).open is True
    assert evaluate_gate([res], "device-plugin").open is True


def test_build_report_keeps_its_context():
    from agent.report import build_report

    results = [_result(c, Status.PASS) for c in ALL_CHECKS]
    rep = build_report(results, "dra", False, "h", 0.0, "0", context={"kube": {"node": "n"}})
    assert rep.context == {"kube": {"node": "n"}}
    assert set(rep.gates) == set(PATHS) and rep.gate is rep.gates["dra"]


def test_policy_defaults_load_without_arguments_and_unknown_versions_are_named():
    from checks.policy import default_policy_data
    from checks.xid.policy import default_xid_data, merge_xid_data

    assert default_policy_data()["policy_version"] == 1
    assert default_xid_data()["policy_version"] == 1
    assert merge_xid_data()["codes"][160]["class"] == "reboot"
    with pytest.raises(ValueError) as err:
        load_policy(3)
    assert str(err.value) == "policy_version 3 is not known to this agent (knows: 1, 2)"


def test_policy_v2_extends_v1_and_an_unpinned_config_gets_it():
    from agent.config import Config
    from checks.policy import default_policy_data

    v1, v2 = default_policy_data(1), default_policy_data(2)
    assert v2["policy_version"] == 2 and "extends" not in v2
    # Every version-1 gate is still there, unchanged, unless version 2 writes it anew.
    assert v2["driver"]["minimum_branch"] == v1["driver"]["minimum_branch"]
    assert load_policy(2).xid == load_policy(1).xid
    assert Config().policy_version == 2
    assert Config(policy_version=1).policy_version == 1


def test_xid_overrides_merge_per_code_and_per_field_and_reject_bad_shapes():
    from agent.safeio.schema import ValidationError
    from checks.xid.policy import load_xid_policy

    new = load_xid_policy({"codes": {156: {"class": "reset-gpu", "catalog": "RESET_GPU"}}})
    assert new.klass(156) == "reset-gpu" and new.is_sticky(156)
    assert load_xid_policy({"default_class": "ignore"}).klass(9999) == "ignore"
    th = load_xid_policy({"default_threshold": {"status": "fail"}}).default_threshold
    assert (th.count, th.window_s, th.status) == (10, 3600, "fail")
    for bad in ({"codes": {13: "ignore"}}, {"default_threshold": 5}, {"source": {"a": 1}}):
        with pytest.raises(ValidationError):
            load_xid_policy(bad)
