"""Which ld.so.cache paths the operator-state check takes as naming a file under a driver root
(checks/operator/state.py ``_inside``): absolute, normalised, no ``..``, no NUL, shorter than
PATH_MAX (4096 bytes with its NUL, linux/limits.h). A path that fails is never joined to the
root: joined, it could name something outside it. Each rule at its edge, for the mutants the
mutation tier left alive."""
import pytest

from checks.operator.state import _inside

LIB = "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"


@pytest.mark.parametrize("path, inside", [
    (LIB, True),
    ("/", True),
    ("usr/lib/libnvidia-ml.so.1", False),  # relative
    ("", False),
    ("/usr/lib/\0/libnvidia-ml.so.1", False),  # a NUL: not a path open(2) would take
    ("/usr/lib/../../etc/libnvidia-ml.so.1", False),  # climbs
    ("/usr/lib/..", False),
    ("/usr//lib/libnvidia-ml.so.1", False),  # not normalised
    ("/usr/lib/./libnvidia-ml.so.1", False),
    ("/usr/lib/", False),
    # Dots and spaces inside a name are a name, not a climb.
    ("/opt/nvidia..535/libnvidia-ml.so.1", True),
    ("/opt/old .. new/libnvidia-ml.so.1", True),
    ("/" + "a" * 4094, True),  # 4095 characters: the longest taken
    ("/" + "a" * 4095, False),  # 4096: PATH_MAX counts the NUL too
])
def test_inside(path: str, inside: bool) -> None:
    assert _inside(path) is inside
