"""Integration tests run once, on the newest Python (scripts/test-all). The CRI client they use
for containerd (container-runtime-interface-api) has no release for Python 3.9, so on older
interpreters the modules that need it are not collected at all, rather than reported as skipped.

A component-missing skip is a failure in CI, and the run counts tests per component:
tests/component_hooks.py (registered in tests/conftest.py).
"""
import sys

collect_ignore = (
    [] if sys.version_info >= (3, 10) else ["test_containerd_cri.py", "test_containerd_cdi_e2e.py",
                                            "test_containerd_cri_21.py", "test_workload_e2e.py"]
)
