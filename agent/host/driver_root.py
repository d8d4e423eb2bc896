"""Where libnvidia-ml.so.1 is under a driver root: the GPU Operator's driver container root
(/run/nvidia/driver on the host), so the NVML worker can load that exact file.

On a host where the GPU Operator installs the driver, the driver's user-space libraries exist
only inside the driver container's root; the host's own loader path has no libnvidia-ml. The
NVML worker is then handed the file found here (agent/nvml/process.py loads it) instead of
letting pynvml dlopen the soname from the host's loader path. LD_LIBRARY_PATH is never pointed
at the root: the loader would then also take that root's libc and every other library the
agent's interpreter needs from it.

The root: NVIDIA/gpu-driver-container, ubuntu22.04/nvidia-driver `_mount_rootfs` bind-mounts
the driver container's / at /run/nvidia/driver (RUN_DIR=/run/nvidia), and the same script
runs `chroot /run/nvidia/driver modprobe ...`: the root is meant to be read as a chroot. Its
user-space libraries are installed by nvidia-installer (--no-kernel-module) into the image's
distribution library directory. Layouts searched, in this order (agent/driver_layout.py
LIB_DIRS), the ones NVIDIA's container toolkit also searches in a driver root
(NVIDIA/nvidia-container-toolkit internal/lookup/root: the root's ld.so.cache, else
/usr/lib64 and /usr/lib/<arch>-linux-gnu):
- /usr/lib/<machine>-linux-gnu, the Debian/Ubuntu multiarch directory, of the Ubuntu-based
  images (ubuntu22.04, ubuntu24.04; that script starts nvidia-gridd from
  /usr/lib/$DRIVER_ARCH-linux-gnu/nvidia/gridd);
- /usr/lib64, of the RHEL-based images (rhel8, rhel9; Filesystem Hierarchy Standard 3.0, 4.7
  "/usr/lib<qual>");
- /usr/lib;
- then the root's own /etc/ld.so.cache, which names the file for any other directory the
  image's ld.so.conf lists (ld.so(8): the loader consults the cache).

The cache is parsed by agent/ldcache.py (core: checks/operator/state.py reads the same
cache to decide whether the operator's driver is present); the file is read bounded
(CACHE_CAP) through agent/safeio.

Every candidate is resolved inside the root with agent/host/resolve.py's Resolver (chroot
semantics: an absolute symlink target is relative to the root, ".." never climbs above it) and
must be a regular file, so the path returned is always a file inside the root: a link that
points outside it resolves inside it instead, and is not found there.
"""
import os
import platform
import stat
from pathlib import Path
from typing import Any, Callable, List, Optional

from agent.driver_layout import LIB_DIRS, NVML_SONAME, OPERATOR_DRIVER_ROOT
from agent.host.resolve import Resolver, read_fd
from agent.ldcache import CACHE_CAP, LD_SO_CACHE, cache_entries
from agent.nvml.process import LibraryChoice


def _machine() -> str:
    return platform.machine()


def library_dirs(machine: Optional[str] = None) -> List[str]:
    """LIB_DIRS less the other architecture's multiarch directory."""
    arch = machine or _machine()
    return [d for d in LIB_DIRS if not d.endswith("-linux-gnu") or d.endswith(f"/{arch}-linux-gnu")]


def _regular(resolver: Resolver, path: str) -> Optional[str]:
    """The canonical in-root path of ``path`` when it is a regular file, else None."""
    try:
        fd, canonical = resolver.open(path)
    except OSError:
        return None
    try:
        return canonical if stat.S_ISREG(os.fstat(fd).st_mode) else None
    finally:
        os.close(fd)


def _from_cache(resolver: Resolver) -> Optional[str]:
    try:
        fd, _ = resolver.open(LD_SO_CACHE)
    except OSError:
        return None
    try:
        data = read_fd(fd, LD_SO_CACHE, CACHE_CAP)
    except OSError:  # a directory, a device, or past the cap: no cache
        return None
    finally:
        os.close(fd)
    for name, path in cache_entries(data, _machine()):
        if name == NVML_SONAME and path.startswith("/"):
            found = _regular(resolver, path)
            if found is not None:
                return found
    return None


def find_nvml_library(root: str) -> Optional[str]:
    """The real path on this machine of libnvidia-ml.so.1 under ``root``, or None."""
    try:
        real_root = os.path.realpath(root)
        resolver = Resolver(Path(real_root))
    except OSError:
        return None
    try:
        found = None
        for directory in library_dirs():
            found = _regular(resolver, f"{directory}/{NVML_SONAME}")
            if found is not None:
                break
        if found is None:
            found = _from_cache(resolver)
    finally:
        resolver.close()
    if found is None:
        return None
    return real_root.rstrip("/") + found


def operator_driver_root(policy: Any) -> Optional[str]:
    """The GPU Operator's driver root when the resolved policy says the operator installs the
    driver on this allocation path (``driver.managed_by_operator`` and an ``operator-*``
    path, as checks/driver/driver_branch.py decides), else None (the host's own driver)."""
    whole = getattr(policy, "policy", None)
    driver = getattr(whole, "driver", None)
    if not getattr(driver, "managed_by_operator", False):
        return None
    if not str(getattr(policy, "path", "")).startswith("operator-"):
        return None
    operator = getattr(whole, "operator", None)
    return str(getattr(operator, "driver_root", None) or OPERATOR_DRIVER_ROOT)


def choose(root: str) -> LibraryChoice:
    """What the NVML worker loads on a host whose driver is the operator's, under ``root``."""
    if not root.startswith("/"):
        return LibraryChoice(None, f"the GPU Operator driver root {root!r} is not absolute")
    found = find_nvml_library(root)
    if found is None:
        searched = ", ".join(library_dirs()) + f" or {LD_SO_CACHE}"
        return LibraryChoice(None, (
            f"{NVML_SONAME} not found under the GPU Operator driver root {root} (searched "
            f"{searched} there): the operator's driver container has not started yet"))
    return LibraryChoice(found, f"{NVML_SONAME} under the GPU Operator driver root {root}")


def nvml_library(
    get_policy: Callable[[], Any],
) -> Callable[[], Optional[LibraryChoice]]:
    """The NVML client's ``library`` argument: asked before each snapshot (and each events
    worker start), it reads the current policy and searches the operator's root anew, so a
    driver that comes up (or is replaced) later is found; None = the host's own loader path."""

    def current() -> Optional[LibraryChoice]:
        root = operator_driver_root(get_policy())
        return None if root is None else choose(root)

    return current
