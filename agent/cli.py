"""The command line: the composition root. Only this module imports the check registry.

Exit codes (README "Exit codes"): 0 gate open and everything asked for done, 1 gate closed,
2 usage or config error (every bad value a user can type: one line, no traceback), 3 internal
error only (one line; the traceback only with --debug), 4 gate open but the verdict was not
fully written.
"""
import argparse
import dataclasses
import os
import sys
import time
from typing import Any, List, NoReturn, Optional, Sequence

from agent.errors import ConfigError
from agent.model import PATHS

EXIT_OPEN, EXIT_CLOSED, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3
EXIT_NOT_WRITTEN = 4  # gate open, `check --apply` could not (fully) write the verdict


class UsageError(Exception):
    """Bad input from the user: one line, exit 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, not usage + error
        raise UsageError(message)


def _emit(text: str) -> None:
    """Write to stdout; a reader that went away (`explain | head`) is not an error. The
    descriptor is then pointed at /dev/null so the interpreter's final flush cannot raise
    again (Python docs, "Note on SIGPIPE" in the signal module)."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):  # not a real file (tests): nothing to do
            pass


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


def _ids(text: Optional[str]) -> List[str]:
    return [p.strip() for p in (text or "").split(",") if p.strip()]


def _registry() -> Any:
    from checks.registry import ALL_CHECKS

    return ALL_CHECKS


def _load_config(path: Optional[str]) -> Any:
    from agent.config import load_config

    config, _origin = load_config(path)
    return config, _origin


def resolve_policy(config: Any, origin: Optional[str], path: str) -> Any:
    from agent.config import policy_error
    from checks.policy import ResolvedPolicy, load_policy

    try:
        policy = load_policy(config.policy_version, config.policy)
    except Exception as exc:  # pydantic.ValidationError or ValueError: a config error
        raise policy_error(exc, origin or "built-in config") from None
    return ResolvedPolicy(policy, path, settings=config.model_dump())


def _validate_ids(ids: Sequence[str], known: Sequence[str], flag: str) -> None:
    unknown = [i for i in ids if i not in known]
    if unknown:
        raise UsageError(
            f"{flag}: unknown check id {', '.join(unknown)} (see `gpu-node-agent explain`)"
        )


def _evaluation(args: argparse.Namespace, checks: Sequence[Any]) -> Any:
    """(config, origin, path, skip ids, resolved policy) for `check` and `run`; raises
    ConfigError/UsageError (exit 2) on a bad file, path or id."""
    if args.config is None and (args.bundle or args.host_root):
        # A bundle or tree is evaluated on its own terms: this machine's default config is
        # not mixed in (pass --config to apply one). See docs/config.md.
        from agent.config import Config

        config, origin = Config(), None
    else:
        config, origin = _load_config(args.config)
    path = args.path or config.allocation_path
    skip = _ids(args.skip) + list(config.skip)
    _validate_ids(skip, [c.id for c in checks], "--skip" if args.skip else f"{origin}: skip")
    return config, origin, path, skip, resolve_policy(config, origin, path)


def cmd_check(args: argparse.Namespace) -> int:
    from agent.cli_kube import ApiWiring
    from agent.engine import Engine
    from agent.host.build import open_host
    from agent.outputs.render import render_json, render_text
    from agent.report import build_report
    from agent.version import version

    checks = _registry()
    config, origin, path, skip, policy = _evaluation(args, checks)
    only = _ids(args.only) or None
    _validate_ids(only or [], [c.id for c in checks], "--only")
    api = ApiWiring()  # the one session of this process (agent/cli_kube.py)
    with open_host(args.host_root, args.bundle, config) as opened:
        host = api.wrap(opened, config) if opened.is_live else opened
        try:
            results = Engine(checks).run(host, policy, only=only, skip=skip)
            report = build_report(
                results, path, args.strict, host.description, time.time(), version()
            )
            # labels, condition
            kube_lines = _kube_verdict(args, config, report, host, api)
        finally:
            api.close()
        if kube_lines is not None:
            report = dataclasses.replace(report, context={**report.context, "kube": kube_lines[1]})
    # `--apply`: each write attempted and its answer (docs/json-output.md `publish`)
    publish = kube_lines[2] if kube_lines is not None and args.apply else None
    if args.format == "json" and publish is not None:
        import json

        from agent.outputs.render import report_dict

        _emit(json.dumps({**report_dict(report), "publish": publish}, indent=2, default=str) + "\n")
    elif args.format == "json":
        _emit(render_json(report))
    else:
        colour = sys.stdout.isatty() and os.environ.get("NO_COLOR") is None
        text = render_text(report, colour=colour)
        if kube_lines is not None:  # before the gate line, which stays the last line
            head, _, gate_line = text.rstrip("\n").rpartition("\n")
            verdict = "".join(f"  {line}\n" for line in ["node verdict:", *kube_lines[0]])
            text = f"{head}\n{verdict}{gate_line}\n"
        _emit(text)
    if not report.gate.open:
        return EXIT_CLOSED  # 1 wins over 4
    if publish is not None and config.kube.enabled and not publish["complete"]:
        return EXIT_NOT_WRITTEN  # gate open, but the Node does not say so (fully)
    return EXIT_OPEN


def _kube_verdict(
    args: argparse.Namespace, config: Any, report: Any, host: Any, api: Any
) -> Any:
    """(text lines, dict, publish dict) of what would be / was written to the Node; None
    with --only."""
    # By the source type, twice over: the flags, and the Host the composition root built.
    if args.apply and (args.bundle is not None or args.host_root is not None or not host.is_live):
        raise UsageError("--apply writes to this host's own Node: not with --bundle/--host-root")
    if args.only:  # a partial run is not a verdict: never shown, never applied
        if args.apply:
            raise UsageError("--apply publishes the whole verdict: not with --only")
        return None
    from agent.outputs.node.verdict import check_verdict

    if host.is_live:  # the session the checks' facts read the Node through
        result = check_verdict(config, report, session=api.session(config, host), apply=args.apply)
    else:  # a fixture: planned against the Node it captured, never written
        result = check_verdict(config, report, node=host.fact("node"))
    return result.lines(), result.as_dict(), result.publish_dict()


def cmd_collect(args: argparse.Namespace) -> int:
    from agent.cli_kube import ApiWiring
    from agent.host.build import open_host
    from agent.host.collect import collect

    config, _ = _load_config(args.config)
    out = args.output or time.strftime("gpu-node-agent-bundle-%Y%m%dT%H%M%SZ.tar.gz", time.gmtime())
    # collect refuses a non-empty directory or an existing file before capturing anything
    # (OutputError, a ConfigError: exit 2 with one line).
    api = ApiWiring()  # the Node and RuntimeClasses, as `check` reads them
    with open_host(args.host_root, None, config) as opened:
        try:
            host = api.wrap(opened, config) if opened.is_live else opened
            target = collect(host, _registry(), out)
        finally:
            api.close()
    _emit(f"bundle written to {target}\n")
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    from agent.explain import explain_lines, list_lines, policy_citations
    from checks.policy import load_policy

    checks = {c.id: c for c in _registry()}
    if args.id is None:
        _emit("".join(f"{line}\n" for line in list_lines(list(checks.values()))))
        return 0
    check = checks.get(args.id)
    if check is None:
        raise UsageError(f"unknown check id {args.id} (known: {', '.join(checks)})")
    config, origin = _load_config(args.config)
    policy = resolve_policy(config, origin, config.allocation_path).policy
    lines = explain_lines(
        check,
        policy,
        load_policy(config.policy_version),
        config.model_dump(),
        origin,
        policy_citations(config.policy_version),
    )
    _emit("".join(f"{line}\n" for line in lines))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """The agent (docs/metrics.md, docs/systemd.md). The loader validates a config exactly as
    a start does, so SIGHUP with a bad file keeps the running one."""
    from agent.daemon import service as daemon

    checks = _registry()

    def load() -> Any:
        from agent.config import run_file_problems

        config, origin, path, skip, policy = _evaluation(args, checks)
        problems = run_file_problems(config, origin)
        if problems:  # at start: exit 2; on SIGHUP: the running config is kept
            raise ConfigError(problems[0])
        return daemon.Generation(config, origin, policy, path, skip, strict=args.strict)

    from agent import cli_run

    return cli_run.main(args, checks, load)


def cmd_clear(args: argparse.Namespace) -> int:
    """Clear a sticky GPU fault (docs/xid.md); takes the state file's lock."""
    from agent.logs import setup
    from agent.xid.clear import ClearUsageError, clear

    config, _ = _load_config(args.config)
    setup(getattr(args, "debug", False))
    try:
        removed = clear(args.target, config.state_dir)
    except ClearUsageError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:  # not root, read-only /var/lib: say where, not a traceback
        raise UsageError(f"clear: cannot update the state in {config.state_dir}: {exc}") from None
    print(f"cleared {len(removed)} sticky fault(s) for {args.target} in {config.state_dir}")
    return 0


def cmd_version(args: argparse.Namespace) -> int:
    from agent.version import version

    _emit(f"gpu-node-agent {version()}\n")
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    import yaml

    from agent.config import load_config

    if args.action == "validate":
        from agent.config import run_file_problems

        config, origin = load_config(args.file)
        resolve_policy(config, origin, config.allocation_path)
        _validate_ids(config.skip, [c.id for c in _registry()], f"{origin}: skip")
        problems = run_file_problems(config, origin)
        if problems:  # everything `run` would refuse at start, not only the first
            raise ConfigError("; ".join(problems))
        _emit(f"{origin}: valid\n")
        return 0
    config, origin = load_config(args.config)
    resolve_policy(config, origin, config.allocation_path)
    _emit(
        f"# effective config ({origin or 'built-in defaults'})\n"
        + yaml.safe_dump(config.model_dump(), sort_keys=False)
    )
    return 0


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


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="gpu-node-agent", description=__doc__.splitlines()[0])
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
    check.set_defaults(func=cmd_check)

    col = sub.add_parser(
        "collect", parents=[common], help="capture what the checks read into a bundle"
    )
    col.add_argument("-o", "--output", metavar="DIR|FILE.tar.gz")
    col.add_argument("--config")
    col.add_argument("--host-root", metavar="DIR", type=_host_root, help=argparse.SUPPRESS)
    col.set_defaults(func=cmd_collect)

    exp = sub.add_parser(
        "explain", parents=[common], help="what a check verifies and how to fix it"
    )
    exp.add_argument("id", nargs="?")
    exp.add_argument("--config", help="show the values this config puts in force")
    exp.set_defaults(func=cmd_explain)

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
    run.set_defaults(func=cmd_run)

    clr = sub.add_parser(
        "clear", parents=[common], help="clear a sticky GPU fault (after a reset the agent missed)"
    )
    clr.add_argument("target", metavar="index|uuid|pci|all")
    clr.add_argument("--config")
    clr.set_defaults(func=cmd_clear)

    ver = sub.add_parser("version", parents=[common], help="print the version")
    ver.set_defaults(func=cmd_version)

    cfg = sub.add_parser("config", parents=[common], help="validate or show the configuration")
    cfg_sub = cfg.add_subparsers(dest="action", parser_class=_Parser, required=True)
    val = cfg_sub.add_parser("validate", parents=[common], help="validate a config file")
    val.add_argument("file")
    show = cfg_sub.add_parser(
        "show", parents=[common], help="print the effective config with defaults"
    )
    show.add_argument("--config")
    cfg.set_defaults(func=cmd_config)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    from agent.errors import BundleError

    words = list(argv if argv is not None else sys.argv[1:])
    # Anywhere before a `--` (a value such as `--only --debug` is refused by the parser anyway).
    debug = "--debug" in (words[: words.index("--")] if "--" in words else words)
    try:
        args = build_parser().parse_args(words)
        if not getattr(args, "func", None):
            raise UsageError("a command is required: check, run, collect, explain, config, version")
        return int(args.func(args))
    except (UsageError, ConfigError, BundleError) as exc:
        print(f"gpu-node-agent: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # the reader went away (`| head`): nothing left to say
        _emit("")
        return EXIT_OPEN
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if debug:
            raise
        print(
            f"gpu-node-agent: internal error: {type(exc).__name__}: {_one_line(exc)}",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


if __name__ == "__main__":
    sys.exit(main())
