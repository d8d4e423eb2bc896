"""The command line's grammar: commands, options and their checks on a value (one line,
exit 2, for anything a user can mistype; agent/cli.py maps UsageError)."""
import argparse
import os
import sys
from typing import Any, Callable, Mapping, NoReturn

from agent.errors import UsageError
from agent.model import PATHS


def _columns() -> int:
    """The terminal's width as ``shutil.get_terminal_size`` finds it (CPython Lib/shutil.py):
    $COLUMNS when a positive integer, else the terminal on stdout, else 80."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns if columns > 0 else 80


class _Help(argparse.HelpFormatter):
    """argparse makes a formatter for every ``add_argument`` (to check the metavar), and the
    stock one imports shutil for the width (with it zlib, bz2 and lzma: about 3.8 ms of each
    one-shot command, bench/bench_footprint.py). The same width, found without shutil."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: Any = None) -> None:
        super().__init__(prog, indent_increment, max_help_position,
                         _columns() - 2 if width is None else width)


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Help)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:  # one line, not usage + error
        raise UsageError(message)


def _host_root(value: str) -> str:
    """--host-root must name a directory: evaluating a tree that is not there would judge an
    empty host and exit 1 with a full report."""
    if not os.path.isdir(value):
        why = "no such directory" if not os.path.exists(value) else "not a directory"
        raise argparse.ArgumentTypeError(f"{value}: {why}")
    return value


def _listen_address(value: str) -> str:
    from agent.config import listen_address_problem

    problem = listen_address_problem(value)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return value


def _evaluation_options(cmd: argparse.ArgumentParser) -> None:
    """What `check` and `run` share: where the host is, which config, path, skips, strict."""
    cmd.add_argument("--config", help="config file (default /etc/gpu-node-agent/config.yaml)")
    where = cmd.add_mutually_exclusive_group()
    where.add_argument(
        "--host-root", metavar="DIR", type=_host_root, help="a bare tree (files only)"
    )
    where.add_argument("--bundle", metavar="B", help="a bundle (directory or .tar.gz)")
    cmd.add_argument("--path", choices=PATHS, help="allocation path (default from config: dra)")
    cmd.add_argument("--skip", metavar="IDS", help="comma-separated check ids to skip")
    cmd.add_argument("--strict", action="store_true", help="warnings close the gate too")


def build_parser(
    commands: Mapping[str, Callable[[argparse.Namespace], int]], description: str
) -> argparse.ArgumentParser:
    """The parser; ``commands`` maps each command's name to the function that runs it (looked
    up by agent/cli.py when it is called, so a test can replace one)."""
    parser = _Parser(prog="gpu-node-agent", description=description)
    parser.add_argument("--debug", action="store_true", help="show tracebacks on internal errors")
    # --debug is also accepted after the subcommand (`check --debug`); SUPPRESS keeps a
    # subcommand without it from resetting the top-level value.
    common = _Parser(add_help=False)
    common.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks"
    )
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)

    check = sub.add_parser(
        "check", parents=[common], help="validate this host (or a bundle) for GPU work"
    )
    _evaluation_options(check)
    check.add_argument("--only", metavar="IDS", help="comma-separated check ids to run")
    check.add_argument("--format", choices=("text", "json"), default="text")
    check.add_argument(
        "--apply", action="store_true", help="write the labels and condition to this Node"
    )
    check.set_defaults(func=commands["check"])

    col = sub.add_parser(
        "collect", parents=[common], help="capture what the checks read into a bundle"
    )
    col.add_argument("-o", "--output", metavar="DIR|FILE.tar.gz")
    col.add_argument("--config")
    col.add_argument("--host-root", metavar="DIR", type=_host_root, help=argparse.SUPPRESS)
    col.add_argument("--with-workload", action="store_true",
                     help="also run gpu-workload's GPU container and record it (docs/workload.md)")
    col.set_defaults(func=commands["collect"])

    exp = sub.add_parser(
        "explain", parents=[common], help="what a check verifies and how to fix it"
    )
    exp.add_argument("id", nargs="?")
    exp.add_argument("--config", help="show the values this config puts in force")
    exp.set_defaults(func=commands["explain"])

    run = sub.add_parser(
        "run", parents=[common], help="the agent: re-run checks, serve metrics, notify systemd"
    )
    _evaluation_options(run)
    run.add_argument(
        "--listen-address", metavar="HOST:PORT", type=_listen_address,
        help="overrides run.listen_address",
    )
    run.add_argument("--dry-run", action="store_true", help="compute Node changes, write none")
    # Tests: the NVML worker (simulated library) beside --host-root; a live host always has it.
    run.add_argument("--nvml", action="store_true", help=argparse.SUPPRESS)
    run.set_defaults(func=commands["run"])

    clr = sub.add_parser(
        "clear", parents=[common], help="clear a sticky GPU fault (after a reset the agent missed)"
    )
    clr.add_argument("target", metavar="index|uuid|pci|all")
    clr.add_argument("--config")
    clr.set_defaults(func=commands["clear"])

    ver = sub.add_parser("version", parents=[common], help="print the version")
    ver.set_defaults(func=commands["version"])

    cfg = sub.add_parser("config", parents=[common], help="validate or show the configuration")
    cfg_sub = cfg.add_subparsers(dest="action", parser_class=_Parser, required=True)
    val = cfg_sub.add_parser("validate", parents=[common], help="validate a config file")
    val.add_argument("file")
    show = cfg_sub.add_parser(
        "show", parents=[common], help="print the effective config with defaults"
    )
    show.add_argument("--config")
    cfg.set_defaults(func=commands["config"])
    return parser
