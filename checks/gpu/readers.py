"""Reading the GPU snapshot (docs/gpu-snapshot.md) as the input it is: a bundle's gpus.json may
hold any JSON value in any field, whatever agent/snapshot.py's records say. Every value a
check reads goes through the readers below, which raise :class:`SnapshotError` (naming the
field the way the page does) for a value of the wrong type; :func:`snapshot_problem` checks
the structure every GPU check relies on before any of them reads a field.
"""
from typing import Any, List, Mapping, Optional

from agent.errors import ParseError

# NVML indices, counts and counters are C unsigned ints (nvml.h); anything past 2**64 is not
# from NVML, and str() of an integer past 4,300 digits raises on Python >= 3.11.
INT_LIMIT = 2**64


class SnapshotError(ParseError):
    """A snapshot field whose value does not have its documented type; ``field`` names it
    the way docs/gpu-snapshot.md does (``gpus[2].ecc.volatile.uncorrected``)."""

    def __init__(self, field: str, expected: str, value: Any) -> None:
        super().__init__(f"field {field} is {kind_of(value)}, expected {expected}")
        self.field = field


def kind_of(value: Any) -> str:
    """A JSON value's type in words (never the value: it may be huge or a secret)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer" if -INT_LIMIT <= value <= INT_LIMIT else "an integer out of range"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    return f"a {type(value).__name__}"


def text(value: Any, limit: int = 80) -> str:
    """A snapshot string made safe for a summary: bounded, and encodable as UTF-8 (JSON can
    carry a lone surrogate such as "\\ud800", which no stream can print). Non-strings are
    described by type."""
    if not isinstance(value, str):
        return f"<{kind_of(value)}>"
    return value[:limit].encode("utf-8", "replace").decode("utf-8")


# -- typed readers: each returns the value or raises SnapshotError naming the field ------
def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def sub(obj: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    """A nested object; null/absent = empty."""
    value = obj.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SnapshotError(_join(where, key), "an object", value)
    return value


def opt_int(obj: Mapping[str, Any], key: str, where: str) -> Optional[int]:
    """An integer (not a boolean) within NVML's range; null/absent = None."""
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or abs(value) > INT_LIMIT:
        raise SnapshotError(_join(where, key), "an integer", value)
    return int(value)


def count(obj: Mapping[str, Any], key: str, where: str) -> int:
    """A counter; null/absent = 0 (as the checks always read it)."""
    value = opt_int(obj, key, where)
    return 0 if value is None else value


def flag(obj: Mapping[str, Any], key: str, where: str) -> Optional[bool]:
    value = obj.get(key)
    if value is None or isinstance(value, bool):
        return value
    raise SnapshotError(_join(where, key), "a boolean", value)


def opt_str(obj: Mapping[str, Any], key: str, where: str) -> Optional[str]:
    value = obj.get(key)
    if value is None or isinstance(value, str):
        return value
    raise SnapshotError(_join(where, key), "a string", value)


def str_list(obj: Mapping[str, Any], key: str, where: str) -> List[str]:
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SnapshotError(_join(where, key), "a list of strings", value)
    return value


def _validate(snap: Any) -> None:
    """The structure every GPU check relies on: a list of GPU objects, each with an integer
    index, an optional error object, an optional errors object and a string PCI id."""
    gpus = snap.get("gpus")
    if gpus is None:
        return
    if not isinstance(gpus, list):
        raise SnapshotError("gpus", "a list", gpus)
    for i, gpu in enumerate(gpus):
        where = f"gpus[{i}]"
        if not isinstance(gpu, Mapping):
            raise SnapshotError(where, "an object", gpu)
        index = gpu.get("index")
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index <= INT_LIMIT:
            raise SnapshotError(f"{where}.index", "a non-negative integer", index)
        sub(gpu, "error", where)
        sub(gpu, "errors", where)
        opt_str(gpu, "pci_bus_id", where)


def snapshot_problem(snap: Any) -> Optional[SnapshotError]:
    """The first structural problem of a snapshot, or None: an object whose ``error`` is an
    object or null (when set, nothing else matters: docs/gpu-snapshot.md), whose GPUs pass
    ``_validate``, whose ``device_count`` is an integer and ``worker.wall_s`` a number."""
    try:
        if not isinstance(snap, Mapping):
            raise SnapshotError("(the whole file)", "an object", snap)
        error = sub(snap, "error", "")
        if error:
            opt_str(error, "kind", "error")
            opt_str(error, "message", "error")
            return None
        _validate(snap)
        opt_int(snap, "device_count", "")
        wall = sub(snap, "worker", "").get("wall_s")
        if wall is not None and (isinstance(wall, bool) or not isinstance(wall, (int, float))
                                 or not abs(wall) < INT_LIMIT):
            raise SnapshotError("worker.wall_s", "a number", wall)
    except SnapshotError as exc:
        return exc
    return None
