"""The version has one source of truth: the installed distribution's metadata."""
import functools
from importlib import metadata

DIST_NAME = "gpu-node-agent"


@functools.lru_cache(maxsize=1)
def version() -> str:
    try:
        return metadata.version(DIST_NAME)
    except metadata.PackageNotFoundError:  # running from a source tree that was never installed
        return "0+unknown"
