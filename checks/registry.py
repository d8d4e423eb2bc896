"""ALL_CHECKS: the explicit registry, in the order reports list them.

Only the command line (the composition root) imports this module.
"""
from typing import Tuple

from agent.model import Check
from checks.driver import DRIVER_BRANCH, DRIVER_LIBRARY_MATCH, DRIVER_LOADED
from checks.kubelet import KUBELET_VERSION
from checks.os_supported import OS_SUPPORTED
from checks.toolkit import TOOLKIT_VERSION

ALL_CHECKS: Tuple[Check, ...] = (
    OS_SUPPORTED,
    DRIVER_LOADED,
    DRIVER_BRANCH,
    DRIVER_LIBRARY_MATCH,
    TOOLKIT_VERSION,
    KUBELET_VERSION,
)


def by_id() -> "dict[str, Check]":
    return {c.id: c for c in ALL_CHECKS}
