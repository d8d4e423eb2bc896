"""Errors the command line turns into one line and exit 2. Kept free of heavy imports so the
CLI can catch them without importing pydantic or PyYAML."""


class ConfigError(Exception):
    """A config problem: one line naming the file, the field and the problem."""


class BundleError(Exception):
    """A bundle that cannot be read: one line naming the file and the problem."""
