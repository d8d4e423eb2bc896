"""The version has one source of truth: the installed distribution's metadata."""
from importlib import metadata

DIST_NAME = "gpu-node-agent"


def version() -> str:
    try:
        return metadata.version(DIST_NAME)
    except metadata.PackageNotFoundError:  # running from a source tree that was never installed
        return "0+unknown"
