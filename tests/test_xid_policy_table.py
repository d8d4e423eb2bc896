"""Every code of the XID policy, asserted against a table written here by hand from NVIDIA's XID
catalog, never read from xid_policy_v1.yaml; and every sticky code driven through gpu-xid.

Source: NVIDIA, "Analyzing Xid Errors with the Xid Catalog", column "Resolution Bucket
(Immediate Action)" (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html), as NVIDIA
publishes it machine-readably in NVIDIA/NVSentinel
distros/kubernetes/nvsentinel/charts/gpu-health-monitor/xiderrorsmapping.csv (commit 6f8b0fc):
RESTART_BM = restart the bare-metal host, RESET_GPU = reset the GPU, RESTART_APP = restart the
application, IGNORE = no action, WORKFLOW_* = the catalog's decision workflow for that code.

Our class for a catalog bucket: RESTART_BM -> reboot, RESET_GPU -> reset-gpu, RESTART_APP ->
restart-app, IGNORE -> ignore. The WORKFLOW_* codes carry the class docs/xid.md justifies
(45: ignore, it only accompanies other XIDs; 48, 74, 144-150: reset-gpu, the safe outcome of
their workflows), and 154 ("follow the guidance of the XID it refers to") is ignore.
"""
from typing import Dict, Tuple

import pytest

from agent.host.seam import Host, StaticFacts, StaticGpus
from agent.model import Status
from checks.policy import ResolvedPolicy, load_policy
from checks.xid.gpu_xid import FIX_REBOOT, FIX_RESET, GPU_XID
from checks.xid.policy import STICKY_CLASSES, load_xid_policy

# code -> (our class, the catalog's bucket)
EXPECTED_XID: Dict[int, Tuple[str, str]] = {
    8: ("restart-app", "RESTART_APP"),
    13: ("restart-app", "RESTART_APP"),
    31: ("restart-app", "RESTART_APP"),
    32: ("restart-app", "RESTART_APP"),
    43: ("ignore", "IGNORE"),
    45: ("ignore", "WORKFLOW_XID_45"),
    46: ("reset-gpu", "RESET_GPU"),
    48: ("reset-gpu", "WORKFLOW_XID_48"),
    62: ("reset-gpu", "RESET_GPU"),
    63: ("ignore", "IGNORE"),
    64: ("reset-gpu", "RESET_GPU"),
    68: ("restart-app", "RESTART_APP"),
    69: ("restart-app", "RESTART_APP"),
    74: ("reset-gpu", "WORKFLOW_NVLINK_ERR"),
    79: ("reboot", "RESTART_BM"),
    92: ("ignore", "IGNORE"),
    94: ("restart-app", "RESTART_APP"),
    95: ("reset-gpu", "RESET_GPU"),
    109: ("reset-gpu", "RESET_GPU"),
    110: ("reset-gpu", "RESET_GPU"),
    119: ("reset-gpu", "RESET_GPU"),
    120: ("reset-gpu", "RESET_GPU"),
    121: ("ignore", "IGNORE"),
    136: ("reset-gpu", "RESET_GPU"),
    140: ("reset-gpu", "RESET_GPU"),
    143: ("reset-gpu", "RESET_GPU"),
    144: ("reset-gpu", "WORKFLOW_NVLINK5_ERR"),
    145: ("reset-gpu", "WORKFLOW_NVLINK5_ERR"),
    146: ("reset-gpu", "WORKFLOW_NVLINK5_ERR"),
    147: ("reset-gpu", "WORKFLOW_NVLINK5_ERR"),
    148: ("reset-gpu", "WORKFLOW_NVLINK5_ERR"),
    149: ("reset-gpu", "WORKFLOW_NVLINK5_ERR"),
    150: ("reset-gpu", "WORKFLOW_NVLINK5_ERR"),
    154: ("ignore", "Follow the guidance of the XID it refers to"),
    155: ("reset-gpu", "RESET_GPU"),
    158: ("reset-gpu", "RESET_GPU"),
    160: ("reboot", "RESTART_BM"),
}
BUCKET_CLASS = {"RESTART_BM": "reboot", "RESET_GPU": "reset-gpu", "RESTART_APP": "restart-app",
                "IGNORE": "ignore"}
STICKY = sorted(c for c, (k, _) in EXPECTED_XID.items() if k in ("reset-gpu", "reboot"))
PCI = "0000:18:00"


def test_the_expected_table_has_the_24_sticky_codes_the_catalog_asks_a_reset_or_reboot_for():
    assert len(STICKY) == 24
    assert [c for c in STICKY if EXPECTED_XID[c][0] == "reboot"] == [79, 160]


@pytest.mark.parametrize("code", sorted(EXPECTED_XID), ids=[f"xid-{c}" for c in sorted(EXPECTED_XID)])
def test_xid_policy_row(code):
    """Mutation 'XID 160 reboot -> restart-app' (and any other code's class) fails here."""
    klass, bucket = EXPECTED_XID[code]
    entry = load_xid_policy().codes.get(code)
    assert entry is not None, f"XID {code} missing from the policy"
    assert entry.klass == klass, f"XID {code}: class {entry.klass}, the catalog says {klass}"
    assert entry.catalog == bucket
    assert entry.why, f"XID {code} carries no reason"
    if bucket in BUCKET_CLASS:
        assert BUCKET_CLASS[bucket] == klass


def test_xid_policy_names_no_code_outside_the_table():
    assert sorted(set(load_xid_policy().codes) - set(EXPECTED_XID)) == []


def test_xid_defaults_and_thresholds():
    xid = load_xid_policy()
    assert xid.default_class == "restart-app"
    assert (xid.default_threshold.count, xid.default_threshold.window_s,
            xid.default_threshold.status) == (10, 3600, "warn")
    assert xid.dedupe_window_s == 5
    assert xid.source == 'NVIDIA XID Errors guide, "Analyzing Xid Catalog" (docs.nvidia.com, read 2026-11)'
    th = xid.threshold(94)
    assert (th.count, th.window_s, th.status) == (3, 86400, "warn")
    assert [c for c, e in xid.codes.items() if e.threshold is not None] == [94]
    # an unknown code is counted, never sticky
    assert xid.klass(9999) == "restart-app" and not xid.is_sticky(9999)
    assert xid.threshold(9999) == xid.default_threshold
    assert STICKY_CLASSES == ("reset-gpu", "reboot")


# -- behaviour: every sticky code through gpu-xid ------------------------------------------------
def _host(tmp_path, lines, sticky=None, boot="b1"):
    root = tmp_path / "root"
    (root / "proc/sys/kernel/random").mkdir(parents=True)
    (root / "proc/sys/kernel/random/boot_id").write_text(boot + "\n")
    facts = StaticFacts({"sticky": sticky} if sticky is not None else {})
    return Host(root, gpus=StaticGpus(None), facts=facts, kmsg=lines)


def _line(code, t=100.0, pci=PCI):
    # The driver's kernel-log format (NVIDIA XID catalog: "NVRM: Xid (PCI:...): <code>, ...").
    return f"[{t:.6f}] NVRM: Xid (PCI:{pci}): {code}, pid=1234, name=python3, test"


def _policy():
    return ResolvedPolicy(load_policy(1), "dra")


def fix_of(out):
    """The fix a report shows: the outcome's own remediation, else its declared failure's fix
    (agent/model.py, as the engine builds CheckResult.remediation)."""
    return out.remediation or GPU_XID.failure(out.code).fix


@pytest.mark.parametrize("code", STICKY, ids=[f"sticky-xid-{c}" for c in STICKY])
def test_every_sticky_xid_code_fails_gpu_xid_with_its_fix(tmp_path, code):
    """Mutation 'XID 160 reboot -> restart-app' and every other sticky code moved out of
    the reset/reboot classes: one line of that code must fail the check, with the fix its
    class needs."""
    out = GPU_XID.run(_host(tmp_path, [_line(code)]), _policy())
    assert out.status == Status.FAIL, (code, out.summary)
    reboot = EXPECTED_XID[code][0] == "reboot"
    assert f"XID {code}" in out.summary
    assert ("needs a reboot" if reboot else "needs a GPU reset") in out.summary
    assert fix_of(out) == (FIX_REBOOT if reboot else FIX_RESET)


@pytest.mark.parametrize("code", [c for c in sorted(EXPECTED_XID) if c not in STICKY],
                         ids=[f"non-sticky-xid-{c}" for c in sorted(EXPECTED_XID) if c not in STICKY])
def test_one_non_sticky_xid_passes(tmp_path, code):
    out = GPU_XID.run(_host(tmp_path, [_line(code)]), _policy())
    assert out.status == Status.PASS, (code, out.summary)
    assert out.details["xid_counts"] == {f"{PCI}:{code}": 1}
    assert out.summary == "1 XID(s) since boot, none needs a GPU reset or reboot"


# -- mixed XIDs: a reboot-class XID among reset-class ones needs the reboot -------------------------
@pytest.mark.parametrize("order", ["reboot-first", "reboot-last"])
def test_mixed_xids_on_one_gpu_advise_the_reboot(tmp_path, order):
    """Mutation 'mixed XIDs advising reset where a reboot is needed': a GPU with XID 48
    (reset-gpu) and XID 79 (reboot) needs the reboot, whichever came first."""
    codes = [79, 48, 95] if order == "reboot-first" else [48, 95, 79]
    lines = [_line(c, 100.0 + i) for i, c in enumerate(codes)]
    out = GPU_XID.run(_host(tmp_path, lines), _policy())
    assert out.status == Status.FAIL
    assert out.summary == f"GPU {PCI}: XID 48, 79, 95 (needs a reboot)"
    assert fix_of(out) == FIX_REBOOT


def test_mixed_xids_on_two_gpus_advise_per_gpu_and_the_reboot_overall(tmp_path):
    other = "0000:3a:00"
    lines = [_line(48, 100.0), _line(160, 101.0, pci=other)]
    out = GPU_XID.run(_host(tmp_path, lines), _policy())
    assert out.status == Status.FAIL
    assert out.summary == (f"GPU {PCI}: XID 48 (needs a GPU reset); "
                           f"GPU {other}: XID 160 (needs a reboot)")
    assert fix_of(out) == FIX_REBOOT


def test_reset_class_only_gets_the_reset_fix(tmp_path):
    out = GPU_XID.run(_host(tmp_path, [_line(48, 100.0), _line(95, 101.0)]), _policy())
    assert out.summary == f"GPU {PCI}: XID 48, 95 (needs a GPU reset)"
    assert fix_of(out) == FIX_RESET


def test_a_sticky_reboot_fault_from_the_state_mixed_with_a_logged_reset_xid(tmp_path):
    """The kernel log rotated the XID 79 line out; the daemon's state still has it."""
    sticky = {"version": 1, "boot_id": "b1", "clears": [], "faults": [
        {"gpu": {"pci": PCI}, "kind": "xid", "code": 79, "class": "reboot",
         "last_mono_us": 5, "count": 2}]}
    out = GPU_XID.run(_host(tmp_path, [_line(48)], sticky=sticky), _policy())
    assert out.status == Status.FAIL
    assert out.summary == f"GPU {PCI}: XID 48, 79 x2 (needs a reboot)"
    assert fix_of(out) == FIX_REBOOT
