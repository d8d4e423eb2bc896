"""The version has one source of truth: the installed distribution's metadata.

The `Version` field is read from the metadata file itself (core metadata, packaging.python.org
"Core metadata specifications"), found the way importlib.metadata finds it: the first sys.path
entry holding this distribution's ``.dist-info`` (METADATA) or ``.egg-info`` (PKG-INFO).
importlib.metadata is imported only when that finds nothing: importing it and scanning every
distribution costs a one-shot `check` about 15 ms (bench/bench_footprint.py).
"""
import functools
import os
import re
import stat
import sys
from typing import Optional

DIST_NAME = "gpu-node-agent"
_PREFIX = DIST_NAME.replace("-", "_")  # as installers name the directory (PEP 427, PEP 503)
_META_CAP = 256 * 1024  # the headers come first; the description may be long


@functools.lru_cache(maxsize=1)
def version() -> str:
    found = _from_metadata_file()
    if found is not None:
        return found
    from importlib import metadata

    try:
        return _sane(metadata.version(DIST_NAME)) or "0+unknown"
    except metadata.PackageNotFoundError:  # running from a source tree that was never installed
        return "0+unknown"


# What a version can hold (PEP 440, local versions included), and a length no real one nears:
# the value goes into the build_info label, JSON reports and bundles' provenance.
_VERSION = re.compile(r"[0-9A-Za-z][0-9A-Za-z.!+_-]{0,127}")


def _sane(value: Optional[str]) -> Optional[str]:
    return value if isinstance(value, str) and _VERSION.fullmatch(value) else None


def _from_metadata_file() -> Optional[str]:
    for entry in sys.path:
        base = entry or "."
        try:
            names = os.listdir(base)
        except OSError:  # missing, not a directory, a zip (importlib.metadata reads those)
            continue
        for name in names:
            low = name.lower()
            if low.startswith(_PREFIX + "-") and low.endswith(".dist-info"):
                meta = os.path.join(base, name, "METADATA")
            elif low.startswith((_PREFIX + "-", _PREFIX + ".")) and low.endswith(".egg-info"):
                meta = os.path.join(base, name, "PKG-INFO")
            else:
                continue
            found = _version_field(meta)
            if found is not None:
                return found
    return None


def _version_field(path: str) -> Optional[str]:
    """The ``Version:`` header of a core-metadata file (RFC 822 headers, then a blank line).
    Read here, not through agent.safeio (core imports no other wing): a regular file only
    (O_NONBLOCK: a FIFO planted there cannot block the open), at most _META_CAP bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(os.dup(fd), "rb") as fh:
            text = fh.read(_META_CAP).decode("utf-8", errors="replace")
    except OSError:
        return None
    finally:
        os.close(fd)
    for line in text.splitlines():
        if not line.strip():
            break  # end of the headers
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() == "version" and value.strip():
            return _sane(value.strip())
    return None
