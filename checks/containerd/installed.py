"""Which containerd is installed (its `--version`, else dpkg's status file) and its own view
of the effective configuration (`containerd config dump`), the authority whenever it answers.

Beside checks/containerd/config.py, which parses and merges the files themselves.
"""
import re
from typing import Any, Dict, Optional, Tuple

from agent.records import record
from checks.base import HostView
from checks.containerd.config import parse_toml, unredact
from checks.dpkg import installed_versions

BINARIES = ("containerd", "/snap/k8s/current/bin/containerd")
VERSION_ARGVS = tuple((b, "--version") for b in BINARIES)
DPKG_STATUS = "/var/lib/dpkg/status"
_DPKG_PACKAGES = ("containerd", "containerd.io")
_VERSION = re.compile(r"\bv?(\d+)\.(\d+)\.(\d+)")


def dump_argv(binary: str, config_path: str) -> Tuple[str, ...]:
    return (binary, "--config", config_path, "config", "dump")


@record
class Installed:
    version: Optional[Tuple[int, int, int]]
    source: str
    binary: Optional[str]  # argv[0] that answered, for `config dump`


def _parse_version(text: str) -> Optional[Tuple[int, int, int]]:
    # "containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3",
    # "containerd containerd.io 1.7.27 05044ec...", "... containerd/v2 v2.1.4 ..."
    m = _VERSION.search(text)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def installed_containerd(host: HostView) -> Installed:
    for argv in VERSION_ARGVS:
        res = host.run(list(argv), timeout=10)
        if res.ok:
            v = _parse_version(res.stdout)
            if v:
                return Installed(v, " ".join(argv), argv[0])
    status = host.read_text_or_none(DPKG_STATUS) or ""
    # Installed means the Status's third word says so (checks/dpkg.py), not "installed"
    # anywhere in the line ("install ok half-installed", "deinstall ok config-files").
    for _, version in installed_versions(status, _DPKG_PACKAGES):
        v = _parse_version(version)
        if v:
            return Installed(v, DPKG_STATUS, None)
    return Installed(None, "", None)


@record
class Dump:
    data: Optional[Dict[str, Any]]
    problem: Optional[str]  # set when containerd answered with an error (config invalid)


def config_dump(host: HostView, binary: Optional[str], config_path: str) -> Optional[Dump]:
    """containerd's own view (the authority), or None when it cannot be asked."""
    if binary is None:
        return None
    res = host.run(list(dump_argv(binary, config_path)), timeout=15)
    # Only a real refusal (exit 1) is authoritative; a signal, a timeout, "not installed" or
    # "not recorded" (collect writes that as rc -1) means containerd could not be asked.
    if res.not_recorded or res.timed_out or res.rc < 0 or res.rc in (126, 127):
        return None
    if res.rc != 0:
        return Dump(None, res.describe())
    data, _ = parse_toml(unredact(res.stdout), "`containerd config dump` output")
    # Output we cannot parse says nothing about containerd itself: our merge decides.
    return Dump(data, None) if data is not None else None
