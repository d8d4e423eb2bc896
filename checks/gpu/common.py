"""What the GPU checks share: reading the snapshot (docs/gpu-snapshot.md) and turning
per-GPU findings into one Outcome.

Ownership (docs/architecture.md): nvml-responsive owns NVML-level errors and gpu-count owns lost
GPUs, so the per-GPU checks leave lost GPUs out (naming them) instead of failing again.
A field NVML answered "not supported" for is not a fault (an H100 PCIe has no NVLink).

The snapshot is input: every value a check reads goes through checks/gpu/readers.py, whose
:class:`SnapshotError` (naming the field) the checks turn into `unknown` (code
``snapshot-malformed``).

Every GPU check is ``run=gpu_check(judge)``: :func:`gpu_check` does the prologue they share
(no snapshot, a malformed one, an NVML-level error) and calls ``judge(host, policy, snap)``
with a usable snapshot.
"""
import functools
from typing import Any, Callable, Dict, Iterator, List, Mapping, Tuple

from agent.records import field, record
from agent.snapshot import GpuRecord, GpuSnapshot
from checks.base import (
    Failure,
    HostView,
    Outcome,
    Status,
    failed,
    needs,
    passed,
    skipped,
    unknown,
    warned,
)
from checks.gpu.policy import GpuPolicy
from checks.gpu.readers import SnapshotError, snapshot_problem, text
from checks.policy import ResolvedPolicy

NVML_REQUIRES = ("nvml-responsive",)

# -- the failure codes every GPU check shares (declared on each: snapshot_failures) -------
SNAPSHOT_MALFORMED = "snapshot-malformed"
FIELD_UNREADABLE = "field-unreadable"
SNAPSHOT_DOC = "docs/gpu-snapshot.md, \"How the GPU checks read it\""
# The fix gpu-ecc and gpu-row-remap share (NVIDIA "GPU Memory Error Management").
DRAIN_RESET = (
    "Drain the node, then reset the GPU (`nvidia-smi -r -i N` with no GPU clients; "
    "docs/runbook-nvml.md) or reboot"
)
MEMORY_ERRORS = ("NVIDIA GPU Memory Error Management "
                 "(docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/)")
def snapshot_failures(reads_fields: bool = True) -> Tuple[Failure, ...]:
    """The unknowns :func:`gpu_check` and :func:`each_field` produce, for a check's
    ``failures``; ``reads_fields=False`` for a check that reads no per-GPU field (gpu-count)."""
    # No snapshot, or one malformed in its structure, is nvml-responsive's (gpu_check skips
    # naming it); a per-GPU field of the wrong type is the check's own.
    out: Tuple[Failure, ...] = ()
    if reads_fields:
        out += (
            Failure(SNAPSHOT_MALFORMED, Status.UNKNOWN,
                    "a snapshot field has the wrong type (the summary names the field)",
                    "The snapshot is not what the NVML worker writes (docs/gpu-snapshot.md): "
                    "collect the bundle again; if the running agent produced it, report an "
                    "agent bug with the field named.", SNAPSHOT_DOC),
            Failure(FIELD_UNREADABLE, Status.UNKNOWN,
                    "NVML answered an error other than not_supported for the field the check "
                    "reads", "The GPU's errors[field] in gpus.json names the NVML error: "
                    "function_not_found means a driver older than the call (upgrade the "
                    "driver); for the others see docs/runbook-nvml.md.", SNAPSHOT_DOC),
        )
    return out


# What a GPU check judges once the prologue has a usable snapshot.
Judge = Callable[[HostView, ResolvedPolicy, GpuSnapshot], Outcome]


def gpu_check(judge: Judge) -> Callable[[HostView, ResolvedPolicy], Outcome]:
    """A GPU check's ``run``: the snapshot, or the outcome to return when there is no usable
    one, then ``judge(host, policy, snap)``. (With requires=nvml-responsive the engine already
    skips these checks on an NVML error; this guards direct calls and hand-edited bundles.)

    Called, not used as ``@gpu_check``: mutmut 3 leaves decorated functions unmutated, and
    the judges are what the mutation tier (tests/mutation/tier.py) must reach."""

    @functools.wraps(judge)
    def run(host: HostView, policy: ResolvedPolicy) -> Outcome:
        # No snapshot, a malformed one, or an NVML error: nvml-responsive owns each of these
        # (it fails or is unknown with its own code), so the GPU check names it and skips.
        snap = host.gpus()
        owner = NVML_REQUIRES[0]
        if snap is None:
            return needs(owner, f"needs {owner} (no GPU snapshot for this host: no gpus.json)")
        problem = snapshot_problem(snap)
        if problem is not None:
            return needs(owner, f"needs {owner} (GPU snapshot malformed: {problem})",
                         field=problem.field)
        error = snap.get("error")
        if error:
            kind = text(error.get("kind") or "error")
            return needs(owner, f"needs {owner} (NVML error: {kind})")
        return judge(host, policy, snap)

    return run


def malformed(exc: SnapshotError, code: str = SNAPSHOT_MALFORMED) -> Outcome:
    return unknown(f"GPU snapshot malformed: {exc}", code=code, field=exc.field)


def gpu_label(gpu: Mapping[str, Any]) -> str:
    bus = gpu.get("pci_bus_id")
    return f"GPU {gpu.get('index')}" + (f" ({text(bus)})" if bus else "")


# A finding: (failure code, message).
Finding = Tuple[str, str]


@record
class Findings:
    """Per-GPU results, folded into one Outcome by ``outcome``; each finding carries its
    failure code and the outcome names the first one of the status it reports."""

    failures: List[Finding] = field(default_factory=list)
    warnings: List[Finding] = field(default_factory=list)
    unreadable: List[Finding] = field(default_factory=list)
    unsupported: List[int] = field(default_factory=list)
    lost: List[int] = field(default_factory=list)
    checked: int = 0
    per_gpu: Dict[int, Any] = field(default_factory=dict)
    # The GPU and field each_field yielded last, as gpus.json names them ("gpus[2]",
    # "gpus[2].ecc"), for SnapshotError messages.
    gpu_where: str = ""
    where: str = ""
    # The GPU each_field is on (None outside its loop), and which GPU each fail/warn names:
    # ``outcome`` lists them as details["gpus_at_fault"] when every finding of the status it
    # reports names one (agent/gpu_health.py counts those GPUs unhealthy).
    gpu: Any = None
    named: List[Tuple[Finding, Any]] = field(default_factory=list)

    def fail(self, code: str, message: str, gpu: Any = None) -> None:
        self.failures.append((code, message))
        self.named.append(((code, message), gpu_ref(gpu if gpu is not None else self.gpu)))

    def warn(self, code: str, message: str, gpu: Any = None) -> None:
        self.warnings.append((code, message))
        self.named.append(((code, message), gpu_ref(gpu if gpu is not None else self.gpu)))

    def at_fault(self, found: List[Finding]) -> List[Dict[str, Any]]:
        """The GPUs ``found`` names, [] unless every finding names one."""
        refs: List[Dict[str, Any]] = []
        for finding in found:
            ref = next((r for f, r in self.named if f == finding and r is not None), None)
            if ref is None:
                return []
            if ref not in refs:
                refs.append(ref)
        return refs

    def malformed(self, exc: SnapshotError) -> None:
        """A GPU whose field has the wrong shape: not checked, the check is unknown."""
        self.checked -= 1
        self.unreadable.append((SNAPSHOT_MALFORMED, f"malformed snapshot: {exc}"))

    def outcome(self, ok_summary: str, what: str, **details: Any) -> Outcome:
        details = dict(details, per_gpu=self.per_gpu, lost_gpus=self.lost,
                       unsupported_gpus=self.unsupported)
        tail = ""
        if self.lost:
            tail = f"; GPU {', '.join(map(str, self.lost))} lost (see gpu-count)"
        if self.failures:
            return failed(_joined(self.failures) + tail, code=self.failures[0][0],
                          **_with_refs(details, self.at_fault(self.failures)))
        if self.unreadable:
            return unknown(f"cannot read {what}: " + _joined(self.unreadable) + tail,
                           code=self.unreadable[0][0], **details)
        if self.warnings:
            return warned(_joined(self.warnings) + tail, code=self.warnings[0][0],
                          **_with_refs(details, self.at_fault(self.warnings)))
        if self.checked == 0:
            if self.unsupported:
                return skipped(f"{what} not supported on any GPU", **details)
            return skipped(f"no readable GPU to check {what} on" + tail, **details)
        note = f" ({len(self.unsupported)} GPU(s) without {what})" if self.unsupported else ""
        return passed(ok_summary.format(n=self.checked) + note + tail, **details)


def gpu_ref(gpu: Any) -> Any:
    """A GPU as details["gpus_at_fault"] names it (index, uuid, pci_bus_id: what the snapshot
    entry holds), None when ``gpu`` is not a snapshot entry."""
    if not isinstance(gpu, Mapping):
        return None
    # The daemon's sticky faults name the slot "pci" (agent/xid/state.py), the snapshot
    # "pci_bus_id".
    pci = gpu.get("pci_bus_id") or gpu.get("pci")
    # The snapshot is hostile input: an index only as an integer, names only as strings and
    # bounded like every snapshot string a verdict repeats (readers.text: 80 characters; a
    # GPU UUID is 40, a PCI bus id 16).
    index = gpu.get("index")
    ref: Dict[str, Any] = {}
    if isinstance(index, int) and not isinstance(index, bool):
        ref["index"] = index
    for key, value in (("uuid", gpu.get("uuid")), ("pci_bus_id", pci)):
        if isinstance(value, str) and value:
            ref[key] = text(value)
    return ref or None


def _with_refs(details: Dict[str, Any], refs: List[Dict[str, Any]]) -> Dict[str, Any]:
    return dict(details, gpus_at_fault=refs) if refs else details


def _joined(found: List[Finding]) -> str:
    return "; ".join(message for _, message in found)


def each_field(
    snap: GpuSnapshot, name: str, findings: Findings, expected: type = Mapping
) -> Iterator[Tuple[GpuRecord, Any]]:
    """Yield (gpu, value) for every GPU whose ``name`` field NVML answered; record lost,
    unsupported, unreadable and malformed GPUs in ``findings`` as it goes. ``snap`` has
    passed the prologue (gpu_check); ``expected`` is the field's type (an object unless said)."""
    for i, gpu in enumerate(snap.get("gpus") or []):
        index = gpu["index"]
        if gpu.get("error"):
            findings.lost.append(index)
            continue
        value = gpu.get(name)
        if value is None:
            err: Any = (gpu.get("errors") or {}).get(name)
            err = err if isinstance(err, Mapping) else {}
            if err.get("kind") == "not_supported":
                findings.unsupported.append(index)
            else:
                message = err.get("message")
                findings.unreadable.append((FIELD_UNREADABLE,
                    f"{gpu_label(gpu)} {name}: {text(err.get('kind', 'missing'))}"
                    + (f" ({text(message, 200)})" if message else "")))
            continue
        if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
            what = {bool: "a boolean", int: "an integer"}.get(expected, "an object")
            findings.unreadable.append((SNAPSHOT_MALFORMED,
                f"malformed snapshot: {SnapshotError(f'gpus[{i}].{name}', what, value)}"))
            continue
        findings.checked += 1
        findings.gpu_where = f"gpus[{i}]"
        findings.where = f"gpus[{i}].{name}"
        findings.gpu = gpu
        yield gpu, value
        findings.gpu = None


def setting(policy: ResolvedPolicy, section: str, name: str, default: Any) -> Any:
    """A config value (policy.settings is config.model_dump()); default when absent."""
    sect = policy.setting(section) if hasattr(policy, "setting") else None
    if isinstance(sect, Mapping) and name in sect:
        return sect[name]
    return default


def gpu_policy(policy: ResolvedPolicy) -> GpuPolicy:
    """The `gpu` policy section (checks/gpu/policy.py), defaults when the Policy lacks it."""
    found = getattr(getattr(policy, "policy", None), "gpu", None)
    return found if isinstance(found, GpuPolicy) else GpuPolicy()
