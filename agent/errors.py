"""Errors the command line turns into one line and exit 2. Kept free of heavy imports so the
CLI can catch them without importing pydantic or PyYAML."""


class ConfigError(Exception):
    """A config problem: one line naming the file, the field and the problem."""


class BundleError(Exception):
    """A bundle that cannot be read: one line naming the file and the problem."""


class ParseError(ValueError):
    """Input a parser refused: malformed, or past one of its limits (size, nesting, alias
    expansion, integer length). One line; callers add the file name and map it to
    ConfigError/BundleError (exit 2) or to a check's `unknown`. A ValueError, so callers that
    already treat a ValueError as bad input keep doing so."""


class OutputError(ConfigError):
    """An output path a command will not write to (`collect -o` naming a non-empty directory
    or an existing file): one line. A ConfigError, so the CLI's exit-2 mapping covers it."""
