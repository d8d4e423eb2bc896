"""Hypothesis strategies for hostile input: JSON values as json.loads can return them (NaN,
infinities, integers up to CPython's 4,300-digit limit, lone surrogates from "\\ud800"),
text with every Unicode category (surrogates and the non-ASCII digits that ``str.isdigit``
accepts but ``int`` refuses, such as "²"), and near-valid shapes of each input."""
from typing import Any, Dict

from hypothesis import strategies as st

# Characters that broke parsers before: non-ASCII digits (isdigit() True, int() refuses "²"),
# a lone surrogate (UTF-8 cannot encode it), NUL, separators the parsers split on.
NASTY_CHARS = ["²", "١", "٣", "߀", "𝟗", "\ud800", "\udcff", "\x00", "\n", "\r", ",", ";", ":",
               "=", "\t", " ", "\\", '"', "'", "#", "-", "+", ".", "x", "\u2028", "\x85"]
ANY_CHAR = st.characters(exclude_categories=())
TEXT = st.text(ANY_CHAR, max_size=40)
NASTY = st.text(st.one_of(st.sampled_from(NASTY_CHARS), ANY_CHAR), max_size=40)
HUGE_INTS = st.sampled_from([2**31, 2**63, 2**64, -(2**63) - 1, 10**308, 10**309, -(10**309),
                             10**4299, -(10**4299)])
INTS = st.one_of(st.integers(), st.integers(-3, 300), HUGE_INTS)
FLOATS = st.floats(allow_nan=True, allow_infinity=True)
# Digit strings: ASCII, non-ASCII digits, and longer than int()'s 4,300-digit limit.
DIGITS = st.one_of(
    st.integers(0, 10**12).map(str),
    st.text(st.sampled_from("0123456789²١٣𝟗"), min_size=1, max_size=12),
    st.just("9" * 5000),
    INTS.map(str),
)

JSON_SCALARS = st.one_of(st.none(), st.booleans(), INTS, FLOATS, NASTY)
JSON = st.recursive(
    JSON_SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.one_of(TEXT, st.sampled_from(["index", "error", "kind", "active",
                                                         "message", "gpus", "links"])),
                        children, max_size=4),
    ),
    max_leaves=8,
)


def maybe(valid: Any) -> Any:
    """Mostly the valid shape, sometimes any JSON value in its place."""
    return st.one_of(valid, valid, JSON)


def shaped(fields: Dict[str, Any]) -> Any:
    """An object with any subset of ``fields`` (each maybe wrong), plus stray keys; or any
    JSON value instead of the object."""
    obj = st.fixed_dictionaries({}, optional={k: maybe(v) for k, v in fields.items()})
    return st.one_of(obj, obj, obj, JSON)


ERROR = shaped({"kind": st.sampled_from(["gpu_lost", "not_supported", "timeout", "nvml_error"]),
                "message": TEXT, "nvml_code": INTS})
COUNTERS = shaped({"corrected": INTS, "uncorrected": INTS})
GPU = shaped({
    "index": INTS,
    "error": st.one_of(st.none(), ERROR),
    "errors": st.dictionaries(st.sampled_from(["ecc", "pcie", "nvlink", "mig", "fabric",
                                               "temperature", "remapped_rows",
                                               "persistence_mode"]), ERROR, max_size=3),
    "uuid": st.one_of(st.just("GPU-01000100-0000-0000-0000-000000000000"), NASTY),
    "name": NASTY,
    "pci_bus_id": st.one_of(st.just("00000000:1A:00.0"), st.just("0000:9b:00.0"), NASTY),
    "memory": shaped({"total_bytes": INTS, "used_bytes": INTS}),
    "temperature": shaped({"gpu_c": INTS, "slowdown_c": INTS, "shutdown_c": INTS}),
    "ecc": shaped({"mode_current": st.booleans(), "mode_pending": st.booleans(),
                   "volatile": COUNTERS, "aggregate": COUNTERS}),
    "remapped_rows": shaped({"correctable": INTS, "uncorrectable": INTS,
                             "pending": st.booleans(), "failure": st.booleans()}),
    "clock_event_reasons": shaped({"mask": INTS, "active": st.lists(
        st.one_of(st.sampled_from(["hw_slowdown", "gpu_idle", "hw_power_brake_slowdown"]),
                  JSON), max_size=3)}),
    "pcie": shaped({"gen_current": INTS, "gen_max": INTS, "width_current": INTS,
                    "width_max": INTS}),
    "nvlink": shaped({"supported": st.booleans(), "links": st.lists(
        shaped({"link": INTS, "active": st.booleans()}), max_size=3)}),
    "mig": shaped({"current": st.sampled_from(["enabled", "disabled"]),
                   "pending": st.sampled_from(["enabled", "disabled"])}),
    "fabric": shaped({"state": st.sampled_from(["completed", "in_progress", "not_supported"]),
                      "status": st.sampled_from(["success", "nvml_error"]),
                      "status_code": INTS, "clique_id": INTS}),
    "persistence_mode": st.booleans(),
})
SNAPSHOT_OBJECT = st.fixed_dictionaries({}, optional={
    "schema_version": maybe(st.just(1)),
    "source": maybe(st.just("nvml")),
    "error": maybe(st.one_of(st.none(), ERROR)),
    "driver_version": maybe(st.one_of(st.just("580.95.05"), NASTY)),
    "errors": JSON,
    "device_count": maybe(INTS),
    "gpus": maybe(st.lists(GPU, max_size=4)),
})
# gpus.json in a bundle is an object (agent/host/bundle.py refuses anything else); a live snapshot
# is built by the agent. Any JSON value still goes in now and then: nothing may depend on it.
SNAPSHOT = st.one_of(SNAPSHOT_OBJECT, SNAPSHOT_OBJECT, SNAPSHOT_OBJECT, JSON)
