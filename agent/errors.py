"""The errors the agent raises toward its user, each carrying the exit code the command line
ends with (README "Exit codes"). `agent.cli.main` maps every AgentError in one place: a user
error (exit 2) prints one line, `gpu-node-agent: error: <message>`; an internal one (exit 3)
prints `gpu-node-agent: internal error: <Type>: <message>`, the traceback only with --debug,
exactly as any other unexpected exception does.

Kept free of heavy imports so every wing can derive from it, and the CLI can catch it without
importing the config records or PyYAML. The exit codes live here so the classes and `main`
share one table.

Deliberately not AgentErrors (they never reach the user as such): the Kubernetes client's
ApiError and Unreachable (agent/kube/errors.py: a request's answer, which the callers turn into
a verdict line, an `unknown` or a retry), NotRegistered (a Node not registered yet: not an
error), and the OSErrors of the host wing (HostPathError, ReadCapExceeded, NotARegularFile:
an OSError by contract, so every reader treats them as an unreadable file; a caller facing the
user names the file and raises ConfigError or BundleError).
"""

EXIT_OPEN = 0  # the gate is open and everything asked for was done
EXIT_CLOSED = 1  # the gate is closed (wins over EXIT_NOT_WRITTEN)
EXIT_USAGE = 2  # usage or config error: one line naming the file, the field and the problem
EXIT_INTERNAL = 3  # internal error only: one line; the traceback only with --debug
EXIT_NOT_WRITTEN = 4  # gate open, `check --apply` could not (fully) write the verdict


class AgentError(Exception):
    """An error the command line ends on with ``exit_code``. A subclass names its code; the
    base's is internal (3): an error nobody classified is the agent's fault, not the user's."""

    exit_code: int = EXIT_INTERNAL


class UsageError(AgentError):
    """Bad input from the user on the command line: one line, exit 2."""

    exit_code = EXIT_USAGE


class ConfigError(AgentError):
    """A config problem: one line naming the file, the field and the problem. Exit 2."""

    exit_code = EXIT_USAGE


class BundleError(AgentError):
    """A bundle that cannot be read: one line naming the file and the problem. Exit 2."""

    exit_code = EXIT_USAGE


class OutputError(ConfigError):
    """An output path a command will not write to (`collect -o` naming a non-empty directory
    or an existing file): one line, exit 2."""


class ParseError(AgentError, ValueError):
    """Input a parser refused: malformed, or past one of its limits (size, nesting, alias
    expansion, integer length). One line; callers add the file name and map it to
    ConfigError/BundleError (exit 2) or to a check's `unknown`. A ValueError, so callers that
    already treat a ValueError as bad input keep doing so. One that reaches the command line
    unmapped is a caller that forgot to name the file: internal (3), as it always was."""

    exit_code = EXIT_INTERNAL


__all__ = [
    "EXIT_OPEN",
    "EXIT_CLOSED",
    "EXIT_USAGE",
    "EXIT_INTERNAL",
    "EXIT_NOT_WRITTEN",
    "AgentError",
    "UsageError",
    "ConfigError",
    "BundleError",
    "OutputError",
    "ParseError",
]
