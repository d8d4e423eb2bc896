"""`explain ID` prints every source a check reads (files, commands, the kernel log, NVML
fields, live facts and the Node), the per-path values in force and each policy value's
citation."""
import re

import pytest

from agent.cli_explain_tables import NVML_FIELDS, POLICY_KEYS, SETTING_KEYS
from agent.explain import policy_citations
from checks.registry import ALL_CHECKS
from tests.conftest import REPO, run_cli


@pytest.mark.parametrize("check", ALL_CHECKS, ids=lambda c: c.id)
def test_explain_prints_every_declared_source(check):
    res = run_cli(["explain", check.id])
    assert res.rc == 0 and res.err == ""
    out = res.out
    for path in check.reads:
        assert f"file     {path}\n" in out
    for pattern in check.presence:
        assert f"exists   {pattern} " in out
    for argv in check.runs:
        assert f"command  {' '.join(argv)}\n" in out
    for fact in check.facts:
        assert f"fact     {fact}: " in out
    assert ("log      the kernel log since boot" in out) is check.uses_kmsg
    assert ("NVML     " in out) is check.uses_gpus


def test_every_nvml_check_names_its_snapshot_fields_and_they_are_documented():
    doc = (REPO / "docs/gpu-snapshot.md").read_text()
    for check in ALL_CHECKS:
        if not check.uses_gpus:
            continue
        assert check.id in NVML_FIELDS, check.id
        for field in NVML_FIELDS[check.id]:
            token = re.match(r"[a-z_]+", field)
            if token and "_" in token.group(0) or field.split()[0] in ("ecc", "mig", "fabric",
                                                                       "pcie", "nvlink",
                                                                       "temperature"):
                name = re.match(r"[a-z_]+", field).group(0)
                assert f"`{name}`" in doc, (check.id, name)


def test_gpu_xid_lists_the_kernel_log_not_only_uptime():
    out = run_cli(["explain", "gpu-xid"]).out
    assert "file     /proc/uptime" in out
    assert "/dev/kmsg" in out and "journalctl -k" in out
    assert "sticky.json" in out
    assert "checks/xid_policy_v1.yaml" in out


def test_driver_branch_shows_each_paths_minimum_and_its_citation():
    out = run_cli(["explain", "driver-branch"]).out
    # policy_v1.yaml: R535 device-plugin/operator-clusterpolicy, R565 dra, R580 gpucluster.
    for path, branch in (("device-plugin", 535), ("dra", 565), ("operator-clusterpolicy", 535),
                         ("operator-gpucluster", 580)):
        assert re.search(rf"^      {path}\s+{branch}$", out, re.M), (path, out)
    flat = " ".join(out.split())
    assert "GPU Operator 25.10 release notes" in flat
    assert "NVIDIA DRA driver for GPUs" in flat
    assert "R580 ltsb until 2028-08-31" in flat


def test_a_value_the_config_overrides_says_where_it_was_set(tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("policy:\n  driver:\n    minimum_branch: {dra: 570}\n")
    out = run_cli(["explain", "driver-branch", "--config", str(cfg)]).out
    assert re.search(r"^      dra\s+570$", out, re.M)
    assert f"source: set in {cfg}" in out


def test_toolkit_and_kubelet_show_per_path_minimums():
    tk = run_cli(["explain", "toolkit-version"]).out
    assert re.search(r"^      dra\s+1\.18\.0$", tk, re.M)
    assert re.search(r"^      device-plugin\s+none \(not gated on this path\)$", tk, re.M)
    kl = run_cli(["explain", "kubelet-version"]).out
    assert re.search(r"^      operator-gpucluster\s+1\.34\.2$", kl, re.M)


def test_the_node_and_the_expected_owner_per_path():
    out = run_cli(["explain", "allocation-owner"]).out
    assert "fact     node: this host's Node from the Kubernetes API" in out
    assert re.search(r"^    dra\s+expected GPU owner: the NVIDIA DRA kubelet plugin$", out, re.M)
    assert re.search(r"^    device-plugin\s+expected GPU owner: the NVIDIA device plugin$", out,
                     re.M)


def test_every_policy_key_exists_and_cites_a_source():
    from checks.policy import load_policy

    policy = load_policy(2)
    cites = policy_citations(2)
    for cid, keys in POLICY_KEYS.items():
        for key in keys:
            node = policy
            for part in key.split("."):
                node = getattr(node, part)
            assert cites.get(key), (cid, key)
    assert set(POLICY_KEYS) | set(SETTING_KEYS) <= {c.id for c in ALL_CHECKS}


def test_policy_citations_never_point_outside_the_repository():
    assert not any("DESIGN" in text for text in policy_citations(1).values())


@pytest.mark.parametrize("check", ALL_CHECKS, ids=lambda c: c.id)
def test_explain_prints_every_declared_failure_code(check):
    out = run_cli(["explain", check.id]).out
    flat = " ".join(out.split())
    for failure in check.failures:
        assert f"\n    {failure.code} ({failure.status})\n" in out
        assert " ".join(failure.fix.split()) in flat
        assert " ".join(failure.source.split()) in flat
    if not check.failures:
        assert "  failures:  (none declared)\n" in out


def test_failure_lines_show_status_finding_fix_and_source():
    from agent.explain import failure_lines
    from agent.model import Check, Failure, Interval, Severity, Status, passed

    check = Check(id="demo", title="t", severity=Severity.WARNING, gates=(),
                  interval=Interval.SLOW, remediation="r", run=lambda h, p: passed("ok"),
                  failures=(Failure("file-empty", Status.FAIL, "the file is empty",
                                    "write the file", "hostname(5)"),
                            Failure("file-missing", Status.UNKNOWN, "no file", "create it",
                                    "hostname(5)")))
    assert failure_lines(check) == [
        "  failures:",
        "    file-empty (fail)",
        "      found:  the file is empty",
        "      fix:    write the file",
        "      source: hostname(5)",
        "    file-missing (unknown)",
        "      found:  no file",
        "      fix:    create it",
        "      source: hostname(5)",
    ]
