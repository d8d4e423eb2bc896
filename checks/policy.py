"""Policy as data: the defaults in policy_v1.yaml, overridable from the config.

Only the composition root loads a Policy; checks receive it resolved for one allocation
path (``ResolvedPolicy``) so they never look the path up themselves.
"""
import datetime
from typing import Any, Dict, List, Mapping, Optional

from agent.model import LATEST_POLICY_VERSION
from agent.safeio.schema import Field, Record
from agent.safeio.yamlio import safe_load
from checks.allocation.policy import SharingPolicy
from checks.containerd.policy import ContainerdPolicy
from checks.driver.policy import OpenModulePolicy
from checks.fabric.policy import ImexPolicy
from checks.gpu.health_policy import HealthPolicy
from checks.gpu.policy import GpuPolicy
from checks.operator.policy import OperatorPolicy
from checks.xid.policy import XidPolicy, merge_xid_data, package_text

KNOWN_POLICY_VERSIONS = tuple(range(1, LATEST_POLICY_VERSION + 1))
# The XID table each policy version uses (xid_policy_v<N>.yaml); v2 changed no XID row.
XID_TABLE_VERSION = {1: 1, 2: 1}


class _Strict(Record, frozen=True):
    """Unknown keys are refused."""


class BranchInfo(_Strict):
    kind: str = Field(pattern="^(ltsb|production|feature)$")
    end_of_life: Optional[datetime.date] = None
    ended: bool = False  # listed as end of life without a date

    def is_past_end_of_life(self, today: datetime.date) -> bool:
        return self.ended or (self.end_of_life is not None and today > self.end_of_life)


class DriverPolicy(_Strict):
    minimum_branch: Dict[str, int]
    allowed_branches: List[int] = []
    branches: Dict[int, BranchInfo] = {}
    warn_past_end_of_life_paths: List[str] = []
    managed_by_operator: bool = False
    # GPUs that need NVIDIA's open kernel module (driver-open-module; checks/driver/policy.py).
    require_open_module: OpenModulePolicy = OpenModulePolicy()


class SecurityBound(_Strict):
    """A toolkit release that fixed a CVE: anything below it fails toolkit-version."""

    fixed_in: str = Field(pattern=r"^\d+\.\d+\.\d+$")
    cve: str = Field(pattern=r"^CVE-\d{4}-\d{4,7}$")
    source: str = ""


class ToolkitPolicy(_Strict):
    minimum_version: Dict[str, Optional[str]]
    managed_by_operator: bool = False
    # Security floor on every path (policy version 2; version 1 has none).
    security_floor: List[SecurityBound] = []


class KubeletPolicy(_Strict):
    minimum_version: Dict[str, Optional[str]]


class OsEntry(_Strict):
    id: str
    versions: List[str]


class OsPolicy(_Strict):
    supported: List[OsEntry]
    deprecated: List[OsEntry] = []


class Policy(_Strict):
    policy_version: int
    driver: DriverPolicy
    toolkit: ToolkitPolicy
    kubelet: KubeletPolicy
    os: OsPolicy
    # XID classes and thresholds: checks/xid_policy_v1.yaml (merged in by load_policy).
    xid: XidPolicy = XidPolicy()
    # GPU health thresholds (the `gpu` section of policy_v1.yaml; checks/gpu/policy.py).
    gpu: GpuPolicy = GpuPolicy()
    # GPU Operator-managed driver and toolkit (checks/operator/policy.py).
    operator: OperatorPolicy = OperatorPolicy()
    # The container-runtime gates policy version 2 adds (checks/containerd/policy.py).
    containerd: ContainerdPolicy = ContainerdPolicy()
    # GPU sharing strategies each allocation path allows (checks/allocation/policy.py).
    sharing: SharingPolicy = SharingPolicy()
    # The IMEX report's gate (checks/fabric/policy.py).
    imex: ImexPolicy = ImexPolicy()
    # How many healthy GPUs keep the gate open (checks/gpu/health_policy.py).
    health: HealthPolicy = HealthPolicy()


class ResolvedPolicy:
    """The policy for one path plus the host-specific settings from the config."""

    def __init__(
        self,
        policy: Policy,
        path: str,
        today: Optional[datetime.date] = None,
        settings: Optional[Mapping[str, Any]] = None,
    ) -> None:
        self.policy = policy
        self.path = path
        self.today = today or datetime.date.today()
        self.settings = dict(settings or {})

    def setting(self, name: str, default: Any = None) -> Any:
        return self.settings.get(name, default)


def _policy_file(version: int) -> Dict[str, Any]:
    text = package_text(f"policy_v{version}.yaml")
    data = safe_load(text)
    assert isinstance(data, dict)
    return data


def default_policy_data(version: int = 1) -> Dict[str, Any]:
    """The shipped defaults of ``version``. A later version's file holds only what it adds or
    changes (``extends: <earlier version>``), so each gate is written once."""
    data = _policy_file(version)
    base = data.pop("extends", None)
    if base is not None:
        data = _deep_merge(default_policy_data(int(base)), data)
    return data


def _deep_merge(base: Dict[str, Any], override: Mapping[str, Any]) -> Dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def load_policy(version: int = 1, overrides: Optional[Mapping[str, Any]] = None) -> Policy:
    """Raises agent.safeio.schema.ValidationError (the caller names the file) or ValueError."""
    if version not in KNOWN_POLICY_VERSIONS:
        known = ", ".join(str(v) for v in KNOWN_POLICY_VERSIONS)
        raise ValueError(f"policy_version {version} is not known to this agent (knows: {known})")
    data = _deep_merge(default_policy_data(version), overrides or {})
    data["xid"] = merge_xid_data(data.get("xid"), XID_TABLE_VERSION[version])
    return Policy.model_validate(data)
