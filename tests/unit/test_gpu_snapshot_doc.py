"""docs/gpu-snapshot.md is the hand-written contract: every key a snapshot carries is documented
there, every error kind the worker or client can emit is in its table, and agent/snapshot.py's
typed records have exactly the page's keys and field shapes (so the two cannot drift)."""
import json
import re
import typing
from pathlib import Path

from agent.nvml.readers import ERROR_KINDS
from agent.snapshot import GpuRecord, GpuSnapshot, NvmlError, WorkerInfo

REPO = Path(__file__).resolve().parents[2]
DOC = (REPO / "docs" / "gpu-snapshot.md").read_text()
BUNDLES = REPO / "tests" / "fixtures" / "bundles"


def documented(section):
    body = DOC.split(f"## {section}", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([a-z_]+)`", body, flags=re.M))


def test_every_snapshot_key_is_documented():
    top, per_gpu = documented("Top level"), documented("Per GPU")
    for bundle in sorted(BUNDLES.glob("gpu-*/gpus.json")):
        snap = json.loads(bundle.read_text())
        assert set(snap) <= top, (bundle, set(snap) - top)
        for gpu in snap["gpus"]:
            assert set(gpu) <= per_gpu, (bundle, set(gpu) - per_gpu)


def test_the_healthy_snapshot_has_every_documented_gpu_field():
    snap = json.loads((BUNDLES / "gpu-h100-snapshot-only" / "gpus.json").read_text())
    assert documented("Per GPU") - {"error"} == set(snap["gpus"][0])


def test_every_error_kind_is_documented():
    kinds = set(re.findall(r"`([a-z_]+)`", DOC.split("## Errors", 1)[1].split("\n## ", 1)[0]))
    emitted = set(ERROR_KINDS.values()) | {"nvml_error", "worker_error", "worker_failed",
                                           "worker_stuck", "maintenance", "timeout"}
    assert emitted <= kinds, emitted - kinds


# -- agent/snapshot.py's TypedDicts say the same as the page ---------------------------------
def _record_keys(td):
    return set(td.__required_keys__) | set(td.__optional_keys__)


def _inner(hint):
    """The record type under Optional[...] / List[...] (None for a plain type)."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) in (typing.Union, list) and len(args) == 1:
        return _inner(args[0])
    # typing.is_typeddict is 3.10+: a TypedDict is a dict subclass with required keys.
    typed = isinstance(hint, type) and issubclass(hint, dict) and hasattr(hint, "__required_keys__")
    return hint if typed else None


def _shape(text):
    """`{a, b: {c}, d: [{e}], f: [names]}` -> {"a": None, "b": {"c": None}, "d": {"e": None},
    "f": None}."""
    pos = 0

    def parse():
        nonlocal pos
        assert text[pos] in "{[", text
        closing = "}" if text[pos] == "{" else "]"
        pos += 1
        if closing == "]" and text[pos] != "{":  # a list of plain values: [names]
            pos = text.index("]", pos) + 1
            return None
        if closing == "]":  # a list of records: the record's shape
            inner = parse()
            assert text[pos] == "]"
            pos += 1
            return inner
        out = {}
        while text[pos] != "}":
            m = re.match(r'\s*"?([a-z_]+)"?\s*', text[pos:])
            key, pos = m.group(1), pos + m.end()
            out[key] = None
            if text[pos] == ":":
                pos += 1
                while text[pos] == " ":
                    pos += 1
                out[key] = parse()
            if text[pos] == ",":
                pos += 1
        pos += 1
        return out

    return parse()


def _assert_same(td, shape, where):
    hints = typing.get_type_hints(td)
    assert set(hints) == set(shape), (where, set(hints) ^ set(shape))
    for key, sub in shape.items():
        inner = _inner(hints[key])
        assert (inner is None) == (sub is None), f"{where}.{key}"
        if sub is not None:
            _assert_same(inner, sub, f"{where}.{key}")


def _rows(section):
    body = DOC.split(f"## {section}", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([a-z_]+)` \| ([^|]+) \|", body, flags=re.M)


def test_the_typed_records_have_the_documented_keys():
    assert _record_keys(GpuSnapshot) == documented("Top level")
    assert _record_keys(GpuRecord) == documented("Per GPU")
    # One error shape at any level: the page's example in "## Errors".
    errors = DOC.split("## Errors", 1)[1]
    example = json.loads(re.search(r"```json\n(.*?)\n```", errors, flags=re.S).group(1))
    assert _record_keys(NvmlError) == set(example)


def test_the_typed_records_have_the_documented_shape_of_each_field():
    hints = typing.get_type_hints(GpuRecord)
    shaped = set()
    for key, kind in _rows("Per GPU"):
        kind = kind.strip().strip("`")
        if kind.startswith("{"):
            _assert_same(_inner(hints[key]), _shape(kind), f"gpus[].{key}")
            shaped.add(key)
    # Every record-typed field is one the page gives a shape, and the other way round.
    typed = {key for key, hint in hints.items() if _inner(hint) is not None} - {"error"}
    assert shaped == typed == {"memory", "temperature", "ecc", "remapped_rows",
                               "clock_event_reasons", "pcie", "nvlink", "mig", "fabric",
                               "power_limit", "applications_clocks"}
    worker = re.search(r"^\| `worker` \|.*$", DOC, flags=re.M).group(0)
    assert _record_keys(WorkerInfo) == set(re.findall(r'"([a-z_]+)"', worker)) == {"pid", "wall_s"}


def test_only_documented_fields_are_required():
    # The page: with a top-level error the other keys may be absent; a lost GPU has only
    # index and error. So the records require no more than these.
    assert set(GpuSnapshot.__required_keys__) == {"schema_version", "source", "captured_at",
                                                  "error", "gpus"}
    assert set(GpuRecord.__required_keys__) == {"index"}


def test_the_worker_bundles_are_typed_records():
    # The healthy snapshot and the MIG one, checked against the records' annotations one level
    # down: every required key, and no key the record lacks (mig.devices is optional: absent
    # when MIG is off, docs/gpu-snapshot.md).
    for name in ("gpu-h100-snapshot-only", "gpu-mig-enabled"):
        snap = json.loads((BUNDLES / name / "gpus.json").read_text())
        for gpu in snap["gpus"]:
            for key, hint in typing.get_type_hints(GpuRecord).items():
                inner = _inner(hint)
                if inner is not None and gpu.get(key) is not None:
                    assert set(inner.__required_keys__) <= set(gpu[key]), (name, key)
                    assert set(gpu[key]) <= _record_keys(inner), (name, key)
            assert "devices" in gpu["mig"] if name == "gpu-mig-enabled" else "devices" not in gpu["mig"]
