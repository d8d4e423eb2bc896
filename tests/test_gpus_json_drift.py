"""Drift check for the committed GPU snapshots: every gpus.json the NVML worker wrote for a
fixture bundle is regenerated from the simulated libnvidia-ml (tests/nvml_sim, compiled
against nvml.h) under its scenario and compared field by field with the committed file.

A change to the worker (a renamed field, a swapped clock-event bit, a new error kind) or to a
scenario that was not followed by `python tests/fixtures/generate.py gpu` fails here,
naming the bundle and the first differing path. Needs gcc (CI installs it): a missing
compiler is a failure, never a skip, because the check tests depend on these fixtures.
"""
import json
from typing import Any, Dict, List, Optional, Tuple

import pytest

from tests.conftest import BUNDLES
from tests.fixtures.families.driver import B200_NVML
from tests.fixtures.families.fabric import CASES as FABRIC_CASES
from tests.fixtures.families.fabric import scenario as fabric_scenario
from tests.fixtures.families.gpu import CHECK_CASES, MALFORMED, snapshot
from tests.fixtures.families.imex import scenario as imex_scenario
from tests.fixtures.families.mig import MIG_CASES, MIG_MALFORMED
from tests.fixtures.families.sku import SKU_CASES, SKU_MALFORMED
from tests.nvml_sim import simlib

pytestmark = pytest.mark.integration

# bundle -> (scenario, library present, client deadline). The bundles
# tests/fixtures/families/gpu.py writes from the worker; full-healthy-* copy
# gpu-h100-snapshot-only's snapshot with the driver version rewritten (families/full.py).
WORKER_BUNDLES: Dict[str, Tuple[str, bool, Optional[float]]] = {
    "gpu-h100-snapshot-only": ("healthy-8xh100.json", True, None),
    "gpu-h200-snapshot-only": ("healthy-8xh200.json", True, None),
    "gpu-lost": ("gpu-lost.json", True, None),
    "gpu-ecc-uncorrectable": ("ecc-uncorrectable.json", True, None),
    "gpu-remap-pending": ("remap-pending.json", True, None),
    "gpu-remap-failure": ("remap-failure.json", True, None),
    "gpu-hw-slowdown": ("hw-slowdown.json", True, None),
    "gpu-hot": ("hot-gpu.json", True, None),
    "gpu-pcie-x8": ("pcie-x8.json", True, None),
    "gpu-nvlink-down": ("nvlink-down.json", True, None),
    "gpu-mig-pending": ("mig-pending.json", True, None),
    "gpu-fabric-in-progress": ("fabric-in-progress.json", True, None),
    "gpu-persistence-off": ("persistence-off.json", True, None),
    "gpu-old-driver-no-fabric": ("old-driver-no-fabric.json", True, None),
    "gpu-driver-mismatch": ("driver-mismatch.json", True, None),
    "gpu-pci8-nvml7": ("seven-gpus.json", True, None),
    "gpu-fabricmanager-inactive": ("healthy-8xh100.json", True, None),
    "gpu-no-library": ("healthy-8xh100.json", False, None),
    # The operator family's copies of it (families/operator.py): NVML before the operator ran.
    "driver-loaded-operator-waiting": ("healthy-8xh100.json", False, None),
    "driver-loaded-operator-late": ("healthy-8xh100.json", False, None),
    "gpu-nvml-timeout": ("hang-handle.json", True, 2.0),
    "gpu-mig-enabled": ("mig-enabled.json", True, None),
    "gpu-ecc-sticky": ("healthy-8xh100.json", True, None),
    # One bundle per GPU-check failure code no scenario above produces (families/gpu.py).
    **{name: (scenario, True, None) for name, scenario, _ in CHECK_CASES},
    # The MIG bundles (families/mig.py), each from its mig-*.json scenario.
    **{name: (scenario, True, None) for name, scenario, _, _ in MIG_CASES},
    "gpu-count-pci-unavailable": ("healthy-8xh100.json", True, None),
    "gpu-count-count-not-expected": ("healthy-8xh100.json", True, None),
    "fabric-manager-service-state-unknown": ("healthy-8xh100.json", True, None),
    # fabric-manager judged by PCI and NVML together: scenarios built in families/fabric.py.
    **{name: (fabric_scenario(name), True, None) for name in FABRIC_CASES},
    # The IMEX bundles (families/imex.py): fabric clique ids per GPU, written here by hand
    # from each bundle's description (one clique 7; cliques 7 and 9; no NVLink fabric).
    **{name: (imex_scenario(cliques, ""), True, None) for name, cliques in (
        ("imex-present", [7, 7, 7, 7]), ("imex-host-service", [7, 7, 7, 7]),
        ("imex-conflict", [7, 7, 7, 7]), ("imex-policy-v1", [7, 7, 7, 7]),
        ("imex-channel-node-mismatch", [7, 7, 7, 7]), ("imex-service-not-recorded", [7, 7, 7, 7]),
        ("imex-clique-mismatch", [7, 7, 9, 9]), ("imex-absent", None))},
    # The gpu-sku bundles (families/sku.py), each from its scenario.
    **{name: (scenario, True, None) for name, scenario, _, _ in SKU_CASES},
    # driver-open-module (families/driver.py): the proprietary module on a B200 leaves NVML
    # with no GPU; the open one lists eight B200; Hopper with either module.
    "driver-open-module-b200-proprietary": ("no-gpus.json", True, None),
    "driver-open-module-b200-proprietary-v1": ("no-gpus.json", True, None),
    "driver-open-module-b200-open": (B200_NVML, True, None),  # type: ignore[dict-item]
    "driver-open-module-h100-proprietary": ("healthy-8xh100.json", True, None),
}
# The worker's healthy snapshot with one value set to a wrong type after it wrote it
# (families/gpu.py MALFORMED): the rest must still be the worker's.
EDITED = {name: (where, value) for name, where, value in MALFORMED}
# The same for the 7 x 1g.10gb MIG snapshot (gpu-mig-enabled's).
EDITED_MIG = {name: (where, value) for name, where, value, _ in MIG_MALFORMED}
# The same for the real H100's figures (sku-8xh100-sxm.json, gpu-sku-h100-sxm-pass's).
EDITED_SKU = {name: (where, value) for name, where, value, _ in SKU_MALFORMED}
DERIVED = {"full-device-plugin-path": "gpu-h100-snapshot-only", "full-healthy-dra": "gpu-h100-snapshot-only",
           "demo-ready": "gpu-h100-snapshot-only", "demo-kubelet-too-old": "gpu-h100-snapshot-only"}
# The sharing family (families/sharing.py) copies gpu-h100-snapshot-only's snapshot verbatim.
DERIVED.update({p.parent.name: "gpu-h100-snapshot-only" for p in BUNDLES.glob("*/gpus.json")
                if p.parent.name.startswith(("allocation-owner-", "gpu-capacity-"))})
# The operator family (families/operator.py) copies full-healthy-dra's, itself this one's.
DERIVED.update({p.parent.name: "gpu-h100-snapshot-only" for p in BUNDLES.glob("*/gpus.json")
                if p.parent.name.startswith(("driver-", "toolkit-", "gpu-operator-"))
                and "-operator-" in p.parent.name + "-" and p.parent.name not in WORKER_BUNDLES})
# The gpu-workload family (families/workload.py) copies gpu-capacity-8-of-8's, itself this one's.
DERIVED.update({p.parent.name: "gpu-h100-snapshot-only" for p in BUNDLES.glob("*/gpus.json")
                if p.parent.name.startswith("gpu-workload-")})
# Bundles whose snapshot is hand-written, not the worker's: xid-* (families/xid.py) and
# their copies gpu-xid-*; nvml-responsive-* (gpu-nvml-timeout's with the top-level error
# replaced, tests/fixtures/PROVENANCE.md); health-* (families/gpu_health.py: families/xid.py's
# snapshot, one GPU dropped in health-one-missing-from-nvml).
HAND_WRITTEN_PREFIX = ("xid-", "gpu-xid-", "nvml-responsive-", "health-")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    try:
        return simlib.build(tmp_path_factory.mktemp("nvml-sim-drift"))
    except simlib.SimUnavailable as exc:  # a failure, not a skip: see the module docstring
        pytest.fail(f"cannot build the simulated libnvidia-ml: {exc}")


def _first_difference(a: Any, b: Any, where: str = "") -> Optional[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            if key not in a or key not in b:
                return f"{where}/{key}: {'missing in regenerated' if key not in a else 'missing in committed'}"
            diff = _first_difference(a[key], b[key], f"{where}/{key}")
            if diff:
                return diff
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{where}: {len(a)} items regenerated, {len(b)} committed"
        for i, (x, y) in enumerate(zip(a, b)):
            diff = _first_difference(x, y, f"{where}[{i}]")
            if diff:
                return diff
        return None
    return None if a == b else f"{where}: regenerated {a!r}, committed {b!r}"


def test_every_committed_gpus_json_is_covered_by_this_drift_check():
    on_disk = sorted(p.parent.name for p in BUNDLES.glob("*/gpus.json"))
    uncovered = [n for n in on_disk if n not in WORKER_BUNDLES and n not in DERIVED
                 and n not in EDITED and n not in EDITED_MIG and n not in EDITED_SKU
                 and not n.startswith(HAND_WRITTEN_PREFIX)]
    assert uncovered == []
    assert sorted(set(WORKER_BUNDLES) | set(DERIVED) | set(EDITED) | set(EDITED_MIG)
                  | set(EDITED_SKU)) == sorted(
        n for n in on_disk if not n.startswith(HAND_WRITTEN_PREFIX))


@pytest.mark.parametrize("bundle", sorted(WORKER_BUNDLES))
def test_committed_gpus_json_matches_the_worker_on_the_simulated_library(built, tmp_path, bundle):
    scenario, library, deadline = WORKER_BUNDLES[bundle]
    committed = json.loads((BUNDLES / bundle / "gpus.json").read_text())
    regenerated = snapshot(built, tmp_path, scenario, library, deadline)
    regenerated["captured_at"] = committed.get("captured_at")
    diff = _first_difference(regenerated, committed)
    assert diff is None, (f"{bundle}/gpus.json drifted from the worker ({scenario}): {diff}; "
                          "rerun python tests/fixtures/generate.py gpu")


@pytest.mark.parametrize("bundle", sorted(DERIVED))
def test_composed_bundles_carry_the_healthy_snapshot(bundle):
    source = json.loads((BUNDLES / DERIVED[bundle] / "gpus.json").read_text())
    derived = json.loads((BUNDLES / bundle / "gpus.json").read_text())
    old, new = source.get("driver_version"), derived.get("driver_version")
    assert old and new
    rewritten: List[Any] = json.loads(json.dumps(source).replace(old, new))
    assert _first_difference(derived, rewritten) is None


@pytest.mark.parametrize("bundle", sorted(EDITED) + sorted(EDITED_MIG) + sorted(EDITED_SKU))
def test_edited_bundles_differ_from_the_healthy_snapshot_in_their_one_value(bundle):
    where, value = {**EDITED, **EDITED_MIG, **EDITED_SKU}[bundle]
    source = ("gpu-h100-snapshot-only" if bundle in EDITED else
              "gpu-mig-enabled" if bundle in EDITED_MIG else "gpu-sku-h100-sxm-pass")
    healthy = json.loads((BUNDLES / source / "gpus.json").read_text())
    edited = json.loads((BUNDLES / bundle / "gpus.json").read_text())
    node: Any = edited
    for key in where[:-1]:
        node = node[key]
    assert node[where[-1]] == value and node[where[-1]] != _at(healthy, where)
    node[where[-1]] = _at(healthy, where)
    assert _first_difference(edited, healthy) is None


def _at(doc: Any, where: Tuple[Any, ...]) -> Any:
    for key in where:
        doc = doc[key]
    return doc
