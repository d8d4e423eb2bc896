"""Per-GPU health: which GPUs the cycle's verdicts name, and whether the healthy ones are
enough to keep the gate open (the `health.min_healthy_gpus` policy, checks/gpu/health_policy.py).

Pure: the results and the GPU snapshot in, a GpuHealth out; agent/report.py weighs it in
the gate. The rules (docs/decisions.md "Per-GPU health"):

- the GPUs are the snapshot's (docs/gpu-snapshot.md) plus any GPU a result names that the
  snapshot lacks (a PCI slot NVML does not list, from gpu-count);
- a GPU is unhealthy when a fail (a warn under strict) that closes the gate (the rule of
  evaluate_gate: critical and fail, or any warn/fail under strict) names it in
  details["gpus_at_fault"]; a check names GPUs only when its verdict is wholly theirs
  (checks/gpu/common.py Findings, gpu-xid, gpu-count), so any other closing result still
  closes the gate, whatever the number;
- with min_healthy_gpus N below the GPU count, the results that only name GPUs stop closing
  the gate while at least N GPUs are healthy; "all" (the default), or N at or above the GPU
  count, leaves the gate as evaluate_gate alone decides;
- only the verdicts of checks whose GPUs the device plugin fences by itself stop closing the
  gate (FENCED: gpu-xid, whose fatal XIDs the plugin's XID health check also sees, and
  gpu-count, whose lost or unlisted GPUs it does not advertise), and of those not gpu-xid's
  repeating application XIDs (UNFENCED); another per-GPU verdict (a row-remap failure, a
  temperature, a MIG mismatch, a fabric registration) marks its GPU unhealthy (JSON, metric,
  annotation) but still closes the gate, because nothing keeps pods off that GPU;
- on DRA paths nothing is tolerated (advisory: only ResourceSlice device taints, behind the
  DRADeviceTaints feature gate, off by default in Kubernetes 1.34, keep DRA from allocating
  one device), so there the gate is today's.
"""
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from agent.model import DRA_PATHS, CheckResult, Severity, Status
from agent.records import record
from agent.snapshot import pci_key

CLOSING = (Status.FAIL, Status.UNKNOWN)
CLOSING_STRICT = (Status.WARN, Status.FAIL, Status.UNKNOWN)
AT_FAULT = "gpus_at_fault"
# The checks whose GPUs the NVIDIA device plugin withdraws by itself, so a node may stay open
# without them: k8s-device-plugin internal/rm/health.go marks a device Unhealthy on an XID
# critical-error event (all but the application XIDs it skips: 13, 31, 43, 45, 68, 109),
# which the kubelet then stops allocating; a GPU NVML does not list is never advertised.
# Nothing fences a GPU for ECC counters, row remaps, temperature, clocks, PCIe or NVLink
# width, MIG mode or SKU: pods would keep landing on it.
FENCED = frozenset({"gpu-xid", "gpu-count"})
# Failure codes of a FENCED check that the plugin does not fence: gpu-xid's repeating
# application-level (restart-app) XIDs, 13, 31, 43, 45, 68 among them, are the ones health.go
# skips, so a GPU they name is unhealthy but its verdict keeps closing the gate.
UNFENCED = frozenset({"xid-repeating-fail"})


@record(frozen=True)
class GpuState:
    """One GPU: what identifies it and the checks that name it (none: healthy)."""

    index: Optional[int]
    uuid: Optional[str]
    pci_bus_id: Optional[str]
    in_nvml: bool
    failing: Tuple[str, ...] = ()

    @property
    def healthy(self) -> bool:
        return not self.failing

    @property
    def name(self) -> str:
        """What the annotation and the metric's ``uuid`` label call it: the UUID, else the PCI
        bus id (a GPU NVML does not list), else ``index:<n>`` (a lost GPU NVML named only by
        its index)."""
        return self.uuid or self.pci_bus_id or f"index:{self.index}"


@record(frozen=True)
class GpuHealth:
    gpus: Tuple[GpuState, ...]
    # The policy's number (None: "all"); ``required`` what it means on this host.
    min_healthy: Optional[int]
    # Check ids whose closing verdict names only GPUs the device plugin fences itself (they
    # stop closing the gate while ``tolerated``).
    attributed: Tuple[str, ...]

    @property
    def healthy_count(self) -> int:
        return sum(1 for g in self.gpus if g.healthy)

    @property
    def unhealthy(self) -> Tuple[GpuState, ...]:
        return tuple(g for g in self.gpus if not g.healthy)

    @property
    def required(self) -> int:
        """The minimum on this host: every GPU for "all" or a number above the count."""
        total = len(self.gpus)
        return total if self.min_healthy is None else min(self.min_healthy, total)

    @property
    def tolerated(self) -> bool:
        """Whether the unhealthy GPUs leave the gate open (on a device-plugin path)."""
        return bool(self.unhealthy) and self.healthy_count >= self.required and (
            self.required < len(self.gpus))

    def tolerates_on(self, path: str) -> bool:
        return self.tolerated and path not in DRA_PATHS


def closes(r: CheckResult, path: str, strict: bool) -> bool:
    """The rule evaluate_gate applies to one result (agent/report.py)."""
    status = r.status_on(path)
    return path in r.gates and (
        (r.severity == Severity.CRITICAL and status in CLOSING)
        or (strict and status in CLOSING_STRICT))


def _index(value: Any) -> Optional[int]:
    ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**32
    return value if ok else None


def _text(value: Any) -> Optional[str]:
    return value if isinstance(value, str) and value else None


def _refs(r: CheckResult) -> List[Mapping[str, Any]]:
    found = (r.details or {}).get(AT_FAULT)
    if not isinstance(found, (list, tuple)):
        return []
    return [ref for ref in found if isinstance(ref, Mapping)]


class _Gpus:
    """The GPU list being built, found by uuid, PCI slot or index (in that order), through
    one dict per name (a host of 1,000 GPUs named by every check: no scan per name)."""

    KEYS = ("uuid", "pci_bus_id", "index")

    def __init__(self, snapshot: Optional[Mapping[str, Any]]) -> None:
        self.rows: List[Dict[str, Any]] = []
        self._by: Dict[str, Dict[Any, List[Dict[str, Any]]]] = {k: {} for k in self.KEYS}
        listed = snapshot.get("gpus") if isinstance(snapshot, Mapping) else None
        for gpu in listed if isinstance(listed, list) else ():
            if isinstance(gpu, Mapping) and _index(gpu.get("index")) is not None:
                self._add(self._row(gpu, True))

    @staticmethod
    def _row(ref: Mapping[str, Any], in_nvml: bool) -> Dict[str, Any]:
        return {"index": _index(ref.get("index")), "uuid": _text(ref.get("uuid")),
                "pci_bus_id": _text(ref.get("pci_bus_id")), "in_nvml": in_nvml, "failing": []}

    @staticmethod
    def _names(gpu: Mapping[str, Any]) -> List[Tuple[str, Any]]:
        found = (_text(gpu.get("uuid")), pci_key(gpu.get("pci_bus_id")), _index(gpu.get("index")))
        return [(k, v) for k, v in zip(_Gpus.KEYS, found) if v is not None]

    def _add(self, row: Dict[str, Any]) -> None:
        self.rows.append(row)
        for key, value in self._names(row):
            self._by[key].setdefault(value, []).append(row)

    def find(self, ref: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
        wanted = self._names(ref)
        if not wanted:
            return None
        # A row that matches every name first: a snapshot may hold one UUID twice (broken or
        # hostile), and the first holder is then not the GPU the check named.
        key, want = wanted[0]
        for row in self._by[key].get(want, ()):
            names = dict(self._names(row))
            if all(names.get(k) == w for k, w in wanted):
                return row
        for key, want in wanted:
            rows = self._by[key].get(want)
            if rows:
                return rows[0]
        return None

    def mark(self, ref: Mapping[str, Any], check_id: str) -> None:
        row = self.find(ref)
        if row is None:  # named but not in the snapshot: a PCI slot NVML does not list
            row = self._row(ref, in_nvml=False)
            self._add(row)
        if check_id not in row["failing"]:
            row["failing"].append(check_id)


def evaluate(
    results: Sequence[CheckResult],
    snapshot: Optional[Mapping[str, Any]],
    path: str,
    strict: bool = False,
    min_healthy: Optional[int] = None,
) -> GpuHealth:
    """Per-GPU health on ``path`` (the report's); ``min_healthy`` None means "all"."""
    gpus = _Gpus(snapshot)
    attributed: List[str] = []
    for r in results:
        refs = _refs(r)
        # an unknown is the agent not seeing: it names no GPU, whatever its details say
        if (not refs or not closes(r, path, strict) or r.status_on(path) != r.status
                or r.status == Status.UNKNOWN):
            continue
        if r.id in FENCED and r.code not in UNFENCED:
            attributed.append(r.id)
        for ref in refs:
            gpus.mark(ref, r.id)
    states = tuple(
        GpuState(row["index"], row["uuid"], row["pci_bus_id"], row["in_nvml"],
                 tuple(row["failing"]))
        for row in gpus.rows)
    return GpuHealth(states, min_healthy, tuple(attributed))


def min_healthy_of(policy: Any) -> Optional[int]:
    """The `health.min_healthy_gpus` of a checks.policy.ResolvedPolicy: None for "all" (and
    for a bare or absent policy)."""
    value = getattr(getattr(getattr(policy, "policy", None), "health", None),
                    "min_healthy_gpus", None)
    return _index(value) if _index(value) else None
