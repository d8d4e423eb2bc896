"""checks/gpu/readers.py, reader by reader: what each returns for a value of its documented
type, and the field and type words it names for any other (the words every GPU check's
`snapshot-malformed` summary repeats).

Expected values are written by hand from docs/gpu-snapshot.md (the snapshot's layout: gpus[i]
objects with an integer index, optional error/errors objects, a string pci_bus_id;
device_count an integer; worker.wall_s a number) and nvml.h (indices and counters are C
unsigned ints, so 2**64 is the largest magnitude the readers accept).
"""
from typing import Any, Optional

import pytest

from checks.gpu.readers import (
    SnapshotError,
    count,
    flag,
    kind_of,
    opt_int,
    opt_str,
    snapshot_problem,
    str_list,
    sub,
    text,
)

LIMIT = 2**64


@pytest.mark.parametrize("value,words", [
    (None, "null"),
    (True, "a boolean"),
    (False, "a boolean"),
    (0, "an integer"),
    (LIMIT, "an integer"),
    (-LIMIT, "an integer"),
    (LIMIT + 1, "an integer out of range"),
    (-LIMIT - 1, "an integer out of range"),
    (1.5, "a number"),
    ("x", "a string"),
    ([1], "a list"),
    ((1,), "a list"),
    ({"a": 1}, "an object"),
    ({1, 2}, "a set"),
])
def test_a_value_is_described_by_its_json_type(value, words):
    assert kind_of(value) == words


def test_text_bounds_a_string_and_describes_anything_else():
    assert text("a" * 100) == "a" * 80
    assert text("abcdef", 3) == "abc"
    assert text("GPU-\ud800") == "GPU-?"  # a lone surrogate no stream can print
    assert text(7) == "<an integer>"
    assert text(None) == "<null>"


def _error(call) -> SnapshotError:
    with pytest.raises(SnapshotError) as info:
        call()
    return info.value


@pytest.mark.parametrize("where,field", [("", "k"), ("gpus[0]", "gpus[0].k")])
def test_a_reader_names_the_field_under_its_parent(where, field):
    exc = _error(lambda: sub({"k": 3}, "k", where))
    assert (exc.field, str(exc)) == (field, f"field {field} is an integer, expected an object")


def test_sub_reads_an_object_and_null_or_absent_as_empty():
    assert sub({"k": {"a": 1}}, "k", "w") == {"a": 1}
    assert sub({"k": None}, "k", "w") == {}
    assert sub({}, "k", "w") == {}


@pytest.mark.parametrize("value,expected", [
    (None, None), (0, 0), (LIMIT, LIMIT), (-LIMIT, -LIMIT), (42, 42)])
def test_opt_int_reads_integers_within_nvml_range(value, expected):
    assert opt_int({"k": value}, "k", "w") == expected


@pytest.mark.parametrize("value,words", [
    (True, "a boolean"), (1.0, "a number"), ("1", "a string"),
    (LIMIT + 1, "an integer out of range"), (-LIMIT - 1, "an integer out of range")])
def test_opt_int_refuses_anything_but_an_integer(value, words):
    exc = _error(lambda: opt_int({"k": value}, "k", "w"))
    assert (exc.field, str(exc)) == ("w.k", f"field w.k is {words}, expected an integer")


def test_count_reads_null_or_absent_as_zero():
    assert (count({}, "k", "w"), count({"k": None}, "k", "w"), count({"k": 3}, "k", "w")) == (
        0, 0, 3)
    assert str(_error(lambda: count({"k": "3"}, "k", "w"))) == (
        "field w.k is a string, expected an integer")


def test_flag_reads_a_boolean_or_null():
    assert (flag({"k": True}, "k", "w"), flag({"k": False}, "k", "w"), flag({}, "k", "w")) == (
        True, False, None)
    exc = _error(lambda: flag({"k": 1}, "k", "w"))
    assert (exc.field, str(exc)) == ("w.k", "field w.k is an integer, expected a boolean")


def test_opt_str_reads_a_string_or_null():
    assert (opt_str({"k": "x"}, "k", "w"), opt_str({}, "k", "w")) == ("x", None)
    exc = _error(lambda: opt_str({"k": ["x"]}, "k", "w"))
    assert (exc.field, str(exc)) == ("w.k", "field w.k is a list, expected a string")


def test_str_list_reads_a_list_of_strings_or_null_as_empty():
    assert (str_list({"k": ["a", "b"]}, "k", "w"), str_list({}, "k", "w")) == (["a", "b"], [])
    for bad, words in (("a", "a string"), (["a", 1], "a list")):
        exc = _error(lambda bad=bad: str_list({"k": bad}, "k", "w"))
        assert (exc.field, str(exc)) == ("w.k", f"field w.k is {words}, expected a list of "
                                         "strings")


def _problem(snap: Any) -> Optional[str]:
    found = snapshot_problem(snap)
    return None if found is None else f"{found.field}: {found}"


@pytest.mark.parametrize("snap,problem", [
    ([], "(the whole file): field (the whole file) is a list, expected an object"),
    ({"error": "lost"}, "error: field error is a string, expected an object"),
    ({"error": {"kind": 3}}, "error.kind: field error.kind is an integer, expected a string"),
    ({"error": {"kind": "x", "message": 3}},
     "error.message: field error.message is an integer, expected a string"),
    ({"gpus": {}}, "gpus: field gpus is an object, expected a list"),
    ({"gpus": [3]}, "gpus[0]: field gpus[0] is an integer, expected an object"),
    ({"gpus": [{"index": 0}, {}]},
     "gpus[1].index: field gpus[1].index is null, expected a non-negative integer"),
    ({"gpus": [{"index": True}]},
     "gpus[0].index: field gpus[0].index is a boolean, expected a non-negative integer"),
    ({"gpus": [{"index": -1}]},
     "gpus[0].index: field gpus[0].index is an integer, expected a non-negative integer"),
    ({"gpus": [{"index": LIMIT + 1}]}, "gpus[0].index: field gpus[0].index is an integer out "
     "of range, expected a non-negative integer"),
    ({"gpus": [{"index": 0, "error": "x"}]},
     "gpus[0].error: field gpus[0].error is a string, expected an object"),
    ({"gpus": [{"index": 0, "errors": []}]},
     "gpus[0].errors: field gpus[0].errors is a list, expected an object"),
    ({"gpus": [{"index": 0, "pci_bus_id": 1}]},
     "gpus[0].pci_bus_id: field gpus[0].pci_bus_id is an integer, expected a string"),
    ({"device_count": "8"}, "device_count: field device_count is a string, expected an integer"),
    ({"worker": 1}, "worker: field worker is an integer, expected an object"),
    ({"worker": {"wall_s": True}},
     "worker.wall_s: field worker.wall_s is a boolean, expected a number"),
    ({"worker": {"wall_s": "1"}},
     "worker.wall_s: field worker.wall_s is a string, expected a number"),
    ({"worker": {"wall_s": float("inf")}},
     "worker.wall_s: field worker.wall_s is a number, expected a number"),
    ({"worker": {"wall_s": -float(LIMIT)}},
     "worker.wall_s: field worker.wall_s is a number, expected a number"),
])
def test_the_first_structural_problem_of_a_snapshot_is_named(snap, problem):
    assert _problem(snap) == problem


@pytest.mark.parametrize("snap", [
    {},
    {"gpus": None},
    {"gpus": [], "device_count": 0, "worker": {"wall_s": 0.25}},
    {"gpus": [{"index": 0, "error": None, "errors": {}, "pci_bus_id": "00000000:18:00.0"},
              {"index": LIMIT}], "worker": {"wall_s": 3}},
    # an NVML-level error: nothing else is read (docs/gpu-snapshot.md)
    {"error": {"kind": "driver_not_loaded", "message": "x"}, "gpus": "anything"},
    {"error": {}, "gpus": [{"index": 0}]},
])
def test_a_well_formed_snapshot_has_no_problem(snap):
    assert _problem(snap) is None
