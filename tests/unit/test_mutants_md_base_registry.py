"""checks/base.py's shared parsers and checks/registry.py's lookup, value by value.

Expected values are written by hand from the functions' docstrings: version_tuple takes the
first dotted version ("v1.34.2-eks-1" -> (1, 34, 2), a missing patch is 0), version_str joins
it back with dots, first_line is the first line of the stripped text cut at ``limit``
characters (160 by default); by_id maps each registered check's id to the check.
"""
import pytest

from checks.base import first_line, version_str, version_tuple
from checks.kubelet_version import KUBELET_VERSION
from checks.os_supported import OS_SUPPORTED
from checks.registry import ALL_CHECKS, by_id


@pytest.mark.parametrize("text, expected", [
    ("v1.34.2-eks-1", (1, 34, 2)),
    ("Kubernetes v1.31", (1, 31, 0)),
    ("containerd 1.7.27 and 2.0.1", (1, 7, 27)),
    ("release 12.10.3", (12, 10, 3)),
    ("", None), (None, None), ("no version", None), ("v1", None),
])
def test_version_tuple_is_the_first_dotted_version(text, expected):
    assert version_tuple(text) == expected


def test_version_str_joins_with_dots():
    assert version_str((1, 34, 2)) == "1.34.2"
    assert version_str((10, 0, 0)) == "10.0.0"


@pytest.mark.parametrize("text, expected", [
    ("\n  first line  \nsecond\n", "first line  "),  # only the whole text is stripped
    ("only", "only"),
    ("", ""), ("\n \n", ""),
    ("x" * 200 + "\nnext", "x" * 160),
])
def test_first_line_of_the_stripped_text_cut_at_160(text, expected):
    assert first_line(text) == expected


def test_first_line_takes_a_limit():
    assert first_line("abcdef\nghi", 3) == "abc"
    assert first_line("abcdef\nghi", limit=0) == ""


def test_by_id_maps_every_registered_check_by_its_id():
    checks = by_id()
    assert len(checks) == len(ALL_CHECKS)
    assert checks["kubelet-version"] is KUBELET_VERSION
    assert checks["os-supported"] is OS_SUPPORTED
    assert list(checks) == [c.id for c in ALL_CHECKS]
