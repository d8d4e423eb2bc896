"""The GPU snapshot (gpus.json, docs/gpu-snapshot.md) through every GPU check, with any JSON
value in any field: each check returns an Outcome (pass/warn/fail/unknown/skip), never
raises; a malformed field makes the check `unknown` naming it."""
from typing import Any, Dict, List, Optional

from hypothesis import strategies as st

from agent.config import Config
from agent.hostview import CommandResult
from agent.model import Outcome, Status
from checks.gpu.driver_persistence import DRIVER_PERSISTENCE
from checks.gpu.fabric_manager import FABRIC_MANAGER
from checks.gpu.gpu_count import GPU_COUNT
from checks.gpu.gpu_ecc import GPU_ECC
from checks.gpu.gpu_nvlink import GPU_NVLINK
from checks.gpu.gpu_pcie_link import GPU_PCIE_LINK
from checks.gpu.gpu_row_remap import GPU_ROW_REMAP
from checks.gpu.gpu_thermal import GPU_THERMAL
from checks.gpu.mig_mode import MIG_MODE
from checks.nvml_responsive import NVML_RESPONSIVE
from checks.policy import ResolvedPolicy, load_policy
from checks.xid.gpu_xid import GPU_XID
from tests.fuzz.conftest import deep, expect, quick
from tests.fuzz.strategies import SNAPSHOT

CHECKS = (NVML_RESPONSIVE, GPU_COUNT, DRIVER_PERSISTENCE, FABRIC_MANAGER, MIG_MODE, GPU_XID,
          GPU_ECC, GPU_ROW_REMAP, GPU_THERMAL, GPU_PCIE_LINK, GPU_NVLINK)
STATUSES = {s.value for s in Status}
POLICY = load_policy(1)
PCI: List[Dict[str, Any]] = [
    {"slot": "0000:1a:00.0", "vendor": "10de", "class": "030200"},
    {"slot": "0000:9b:00.0", "vendor": "10de", "class": "068000"},
]


class SnapshotHost:
    """The Host calls the GPU checks make, answering with one fuzzed snapshot."""

    def __init__(self, snapshot: Any, pci: Optional[List[Dict[str, Any]]]) -> None:
        self._snapshot = snapshot
        self._pci = pci

    def gpus(self) -> Any:
        return self._snapshot

    def fact(self, name: str) -> Any:
        return self._pci if name == "pci_devices" else None

    def boot_id(self) -> Optional[str]:
        return "00000000-0000-0000-0000-000000000000"

    def run(self, argv: List[str], timeout: float = 0.0) -> CommandResult:
        return CommandResult(tuple(argv), 0, "active\n")

    def kmsg(self) -> List[str]:  # gpu-xid maps these to GPUs through the snapshot
        return ["NVRM: GPU at PCI:0000:1a:00: GPU-01000100-0000-0000-0000-000000000000",
                "6,812,5000000,-;NVRM: Xid (PCI:0000:1a:00): 79, pid=1, name=x"]


CASES = st.tuples(SNAPSHOT, st.sampled_from(["none", "single", "mixed"]),
                  st.sampled_from([None, 2, 8]), st.sampled_from([None, PCI]))


def through_the_checks(case: Any) -> None:
    snapshot, strategy, expected, pci = case
    settings = Config(gpu={"mig_strategy": strategy}, expected_gpus=expected).model_dump()
    policy = ResolvedPolicy(POLICY, "dra", settings=settings)
    host = SnapshotHost(snapshot, pci)
    for check in CHECKS:
        out = check.run(host, policy)
        expect(isinstance(out, Outcome), f"{check.id} returned {type(out).__name__}")
        expect(str(out.status) in STATUSES, f"{check.id} status", out.status)
        expect(isinstance(out.summary, str), f"{check.id} summary is not text")
        try:
            out.summary.encode("utf-8")  # printed by `check`, logged by `run`
        except UnicodeEncodeError:
            expect(False, f"{check.id} summary cannot be printed", out.summary)


test_gpu_checks_quick = quick(CASES, through_the_checks)
test_gpu_checks_deep = deep("gpu snapshot through the GPU checks", CASES, through_the_checks)
