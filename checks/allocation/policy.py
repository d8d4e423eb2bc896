"""The `sharing` policy section: which GPU sharing strategies each allocation path allows.

NVIDIA's device plugin shares a GPU by time-slicing or by CUDA MPS (k8s-device-plugin README,
"Shared Access to GPUs": `sharing.timeSlicing`, `sharing.mps`); either hands one GPU to several
pods, which the exclusive device-plugin path must not do. allocation-owner fails a strategy
the path does not allow (checks/allocation/sharing.py finds the evidence).

The defaults are policy version 1's verdicts: only MPS blocks the device-plugin path (the
`nvidia.com/mps.capable` rule allocation-owner had before this section). policy_v2.yaml
allows no sharing on the device-plugin path. On the other paths sharing is reported, never
failed (docs/decisions.md, "GPU sharing per allocation path"):
- operator-clusterpolicy runs the same device plugin, and the GPU Operator documents
  time-slicing and MPS as configurations of it ("Time-Slicing GPUs in Kubernetes",
  devicePlugin.config);
- the DRA paths share per claim (k8s-dra-driver-gpu: GpuConfig sharing strategies
  TimeSlicing and MPS in a ResourceClaim's opaque config), not per node.
"""
from typing import Dict, List, Literal

from agent.model import PATHS
from agent.safeio.schema import Record, field_validator

Strategy = Literal["time-slicing", "mps"]
STRATEGIES = ("time-slicing", "mps")


class _Strict(Record, frozen=True):
    """Unknown keys are refused."""


def _v1_allowed() -> Dict[str, List[Strategy]]:
    return {
        "device-plugin": ["time-slicing"],
        "dra": ["time-slicing", "mps"],
        "operator-clusterpolicy": ["time-slicing", "mps"],
        "operator-gpucluster": ["time-slicing", "mps"],
    }


class SharingPolicy(_Strict):
    # Per allocation path, the sharing strategies a node may use; a path not listed allows
    # both. A strategy found and not allowed fails allocation-owner.
    allowed: Dict[str, List[Strategy]] = _v1_allowed()

    @field_validator("allowed")
    @classmethod
    def _known_paths(cls, value: Dict[str, List[Strategy]]) -> Dict[str, List[Strategy]]:
        unknown = sorted(set(value) - set(PATHS))
        if unknown:
            raise ValueError(f"unknown allocation path {unknown[0]!r} (known: {', '.join(PATHS)})")
        return value

    def allows(self, path: str, strategy: str) -> bool:
        return strategy in self.allowed.get(path, list(STRATEGIES))
