"""Where the tests find the real components they drive.

Daemons that are only test oracles (containerd 1.6/1.7/2.1, runc, chronyd, prometheus,
node_exporter, systemd-journal-remote, umockdev-run, ...) are Debian packages unpacked into a
cache by .ci/setup.d/*.sh (`dpkg-deb -x`, nothing installed), never the machine's own copies
or services. Tools a developer has on the machine anyway (lintian, rpm, systemd-analyze, gcc)
come from PATH.

- ``component(name)`` returns the program's path, or skips the test naming the setup script
  that provides it. With ``GNA_REQUIRE_COMPONENTS=1`` (CI: scripts/test-all) a missing
  component fails the test instead (tests/integration/conftest.py also turns any other skip
  of an integration test into a failure there).
- ``GNA_COMPONENT_<NAME>`` (NAME upper-cased, ``-`` and ``.`` as ``_``, e.g.
  ``GNA_COMPONENT_CONTAINERD_2_1``) overrides where one is found; set it to an empty string
  or a path that does not exist to hide that component.
- Each use is recorded against the running test, so the integration tier can print how many
  tests ran per component.
"""
import os
import shutil
from pathlib import Path
from typing import Dict, NamedTuple, NoReturn, Optional, Set

import pytest

REPO = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("GNA_CI_CACHE") or REPO / ".cache" / "ci")


class Spec(NamedTuple):
    label: str  # what the per-component count calls it
    cached: Optional[str]  # path under CACHE (unpacked), or None: found on PATH
    setup: str  # the setup script that provides it


SPECS: Dict[str, Spec] = {
    "containerd-1.6": Spec("containerd-1.6", "containerd-1.6/root/usr/bin/containerd", "30-containerd.sh"),
    "containerd-1.7": Spec("containerd-1.7", "containerd-1.7/root/usr/bin/containerd", "30-containerd.sh"),
    "containerd-2.1": Spec("containerd-2.1", "containerd-2.1/root/usr/bin/containerd", "30-containerd.sh"),
    "runc": Spec("runc", "runc/root/usr/sbin/runc", "30-containerd.sh"),
    "busybox": Spec("busybox", "runc/root/bin/busybox", "30-containerd.sh"),
    "chronyd": Spec("chrony", "chrony/root/usr/sbin/chronyd", "40-chrony.sh"),
    "chronyc": Spec("chrony", "chrony/root/usr/bin/chronyc", "40-chrony.sh"),
    "prometheus": Spec("prometheus", "prometheus/root/usr/bin/prometheus", "50-prometheus.sh"),
    "promtool": Spec("prometheus", "prometheus/root/usr/bin/promtool", "50-prometheus.sh"),
    "node_exporter": Spec("node-exporter", "prometheus/root/usr/bin/prometheus-node-exporter",
                          "50-prometheus.sh"),
    "wrk": Spec("wrk", "wrk/bin/wrk", "50-prometheus.sh"),
    "systemd-journal-remote": Spec("journal-remote", "journal-remote/bin/systemd-journal-remote",
                                   "55-journal-remote.sh"),
    "umockdev-run": Spec("umockdev", "umockdev/bin/umockdev-run", "20-nvml.sh"),
    "shellcheck": Spec("packaging", "shellcheck/root/usr/bin/shellcheck", "60-packaging.sh"),
    # On PATH: part of Debian's base system or installed by the setup (README lists them).
    "systemd-analyze": Spec("systemd-analyze", None, "50-prometheus.sh"),
    "journalctl": Spec("journal-remote", None, "55-journal-remote.sh"),
    "lintian": Spec("packaging", None, "60-packaging.sh"),
    "rpm": Spec("packaging", None, "60-packaging.sh"),
    "dpkg-architecture": Spec("packaging", None, "60-packaging.sh"),
    "dpkg-deb": Spec("packaging", None, "60-packaging.sh"),
}

# label -> node ids of the tests that used it (filled by component() and record()).
USED: Dict[str, Set[str]] = {}


def required() -> bool:
    """CI's switch: a missing component is a failure, not a skip."""
    return os.environ.get("GNA_REQUIRE_COMPONENTS", "") not in ("", "0")


def env_name(name: str) -> str:
    return "GNA_COMPONENT_" + "".join(c if c.isalnum() else "_" for c in name).upper()


def current_test() -> Optional[str]:
    # pytest sets PYTEST_CURRENT_TEST to "<node id> (<phase>)" while a test runs.
    current = os.environ.get("PYTEST_CURRENT_TEST")
    return current.rsplit(" (", 1)[0] if current else None


def record(label: str) -> None:
    """Counts the running test under label (for tests that drive a component through a path
    this module does not resolve, such as the simulated NVML library or the Ansible venv)."""
    test = current_test()
    if test:
        USED.setdefault(label, set()).add(test)


def locate(name: str) -> Optional[str]:
    """The path of an executable component, or None; no recording, no skipping."""
    spec = SPECS[name]
    override = os.environ.get(env_name(name))
    if override is not None:
        return override if override and os.access(override, os.X_OK) else None
    if spec.cached is None:
        return shutil.which(name)
    path = CACHE / spec.cached
    return str(path) if os.access(path, os.X_OK) else None


def missing(label: str, why: str) -> NoReturn:
    """Skips the running test, or fails it under GNA_REQUIRE_COMPONENTS=1."""
    record(label)
    if required():
        pytest.fail(f"required component {label} missing (GNA_REQUIRE_COMPONENTS=1): {why}",
                    pytrace=False)
    pytest.skip(why)
    raise AssertionError("unreachable")  # pytest.skip raises


def component(name: str) -> str:
    """The path of the component `name` (a key of SPECS), recorded against the running test;
    skips (or, under GNA_REQUIRE_COMPONENTS=1, fails) the test when it is missing."""
    spec = SPECS[name]
    path = locate(name)
    if path is None:
        if env_name(name) in os.environ:
            where = f"{env_name(name)}={os.environ[env_name(name)]!r} is not an executable"
        else:
            where = f"not at {CACHE / spec.cached}" if spec.cached else "not on PATH"
        missing(spec.label, f"{name} {where}: run .ci/setup.d/{spec.setup}")
    record(spec.label)
    return str(path)


def ansible_venv() -> Path:
    """The Ansible controller's venv (.ci/setup.d/70-ansible.sh creates it)."""
    return Path(os.environ.get("GNA_ANSIBLE_VENV") or CACHE / "ansible")
