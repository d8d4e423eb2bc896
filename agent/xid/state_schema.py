"""The sticky state file's shape: what a valid ``sticky.json`` holds, field by field.

agent/xid/state.py writes the file and reads it back through ``valid_state``; anything else
is a corrupt file, replaced by a fresh state. Types are JSON's as the json module maps them,
where a bool is never a number (json.loads turns ``true`` into True, an int in Python).
"""

from typing import Any, Mapping

SCHEMA_VERSION = 1


def _is(value: Any, *types: type) -> bool:
    """isinstance for JSON values, where a bool is never an int or a float."""
    if isinstance(value, bool):
        return bool in types
    return isinstance(value, types)


_NUM = (int, float)
_FAULT_FIELDS = {  # field: the JSON types it may have (None: may be null or absent)
    "kind": (str,), "code": (int, type(None)), "class": (str, type(None)),
    "source": (str, type(None)), "count": (int,), "message": (str, type(None)),
    "first_mono_us": (int, type(None)), "last_mono_us": (int, type(None)),
    "first_at": (*_NUM, type(None)), "last_at": (*_NUM, type(None)),
    "volatile_uncorrected": (int, type(None)),
}
_CLEAR_FIELDS = {
    "selector": (str,), "by": (str, type(None)), "reason": (str, type(None)),
    "mono_us": (int, type(None)), "at": (*_NUM, type(None)),
}
_GPU_FIELDS = {"pci": (str, type(None)), "uuid": (str, type(None)), "index": (int, type(None))}


def _fields_ok(record: Any, spec: Mapping[str, Any]) -> bool:
    return isinstance(record, dict) and all(
        _is(record[k], *types) for k, types in spec.items() if k in record
    )


def _str_list(value: Any) -> bool:
    return value is None or (isinstance(value, list) and all(isinstance(v, str) for v in value))


def valid_state(data: Any) -> bool:
    """The whole file has the shape and the field types agent/xid/state.py writes: a file of the
    right shape with a wrong type inside (a count that is a string, a GPU that is a list) is
    corrupt too, or reading it would raise on every cycle and in `clear`."""
    if not (
        isinstance(data, dict)
        and data.get("version") == SCHEMA_VERSION
        and _is(data.get("boot_id"), str, type(None))
        and isinstance(data.get("faults"), list)
        and isinstance(data.get("clears"), list)
    ):
        return False
    seen = data.get("ecc_seen", {})
    if not isinstance(seen, dict) or not all(_is(v, int) for v in seen.values()):
        return False
    for fault in data["faults"]:
        if not _fields_ok(fault, _FAULT_FIELDS) or not _fields_ok(fault.get("gpu", {}),
                                                                 _GPU_FIELDS):
            return False
    for clear in data["clears"]:
        if not _fields_ok(clear, _CLEAR_FIELDS) or "selector" not in clear:
            return False
        if not (_str_list(clear.get("pci")) and _str_list(clear.get("classes"))):
            return False
    return True
