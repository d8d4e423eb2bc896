"""The command line: the composition root. Only this module imports the check registry.

Exit codes: 0 gate open, 1 gate closed, 2 usage or config error, 3 internal error (one
line; the traceback only with --debug).
"""
import argparse
import dataclasses
import os
import sys
import time
from typing import Any, List, NoReturn, Optional, Sequence

from agent.model import PATHS

EXIT_OPEN, EXIT_CLOSED, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3


class UsageError(Exception):
    """Bad input from the user: one line, exit 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, not usage + error
        raise UsageError(message)


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
    from agent.engine import Engine
    from agent.hosts import open_host
    from agent.outputs import render_json, render_text
    from agent.report import build_report
    from agent.version import version

    checks = _registry()
    config, origin, path, skip, policy = _evaluation(args, checks)
    only = _ids(args.only) or None
    _validate_ids(only or [], [c.id for c in checks], "--only")
    with open_host(args.host_root, args.bundle, config) as host:
        results = Engine(checks).run(host, policy, only=only, skip=skip)
        report = build_report(
            results, path, args.strict, host.description, time.time(), version()
        )
        kube_lines = _kube_verdict(args, config, report, host)  # issue 8: labels, condition
        if kube_lines is not None:
            report = dataclasses.replace(report, context={**report.context, "kube": kube_lines[1]})
    if args.format == "json":
        sys.stdout.write(render_json(report))
    else:
        colour = sys.stdout.isatty() and os.environ.get("NO_COLOR") is None
        text = render_text(report, colour=colour)
        if kube_lines is not None:  # before the gate line, which stays the last line
            head, _, gate_line = text.rstrip("\n").rpartition("\n")
            verdict = "".join(f"  {line}\n" for line in ["node verdict:", *kube_lines[0]])
            text = f"{head}\n{verdict}{gate_line}\n"
        sys.stdout.write(text)
    return EXIT_OPEN if report.gate.open else EXIT_CLOSED


def _kube_verdict(args: argparse.Namespace, config: Any, report: Any, host: Any) -> Any:
    """(text lines, dict) of what would be written to the Node; None with --only."""
    if args.apply and not host.is_live:
        raise UsageError("--apply writes to this host's own Node: not with --bundle/--host-root")
    if args.only:  # a partial run is not a verdict: never shown, never applied
        if args.apply:
            raise UsageError("--apply publishes the whole verdict: not with --only")
        return None
    from agent.kube.publish import check_verdict

    result = check_verdict(config, report, host, apply=args.apply)
    return result.lines(), result.as_dict()


def cmd_collect(args: argparse.Namespace) -> int:
    from agent.collect import collect
    from agent.hosts import open_host

    config, _ = _load_config(args.config)
    out = args.output or time.strftime("gpu-node-agent-bundle-%Y%m%dT%H%M%SZ.tar.gz", time.gmtime())
    with open_host(args.host_root, None, config) as host:
        target = collect(host, _registry(), out)
    print(f"bundle written to {target}")
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    checks = {c.id: c for c in _registry()}
    if args.id is None:
        for c in checks.values():
            print(f"{c.id:<28} {c.severity!s:<9} {c.title}")
        return 0
    check = checks.get(args.id)
    if check is None:
        raise UsageError(f"unknown check id {args.id} (known: {', '.join(checks)})")
    print(f"{check.id}: {check.title}")
    print(f"  severity:  {check.severity}")
    print(f"  gates:     {', '.join(check.gates) or '(none)'}")
    print(f"  interval:  {check.interval}")
    if check.requires:
        print(f"  requires:  {', '.join(check.requires)}")
    if check.reads:
        print(f"  reads:     {', '.join(check.reads)}")
    if check.runs:
        print("  runs:      " + "; ".join(" ".join(a) for a in check.runs))
    print(f"  fix:       {check.remediation}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """The agent (docs/metrics.md, docs/systemd.md). The loader validates a config exactly as
    a start does, so SIGHUP with a bad file keeps the running one."""
    from agent import daemon

    checks = _registry()

    def load() -> Any:
        config, origin, path, skip, policy = _evaluation(args, checks)
        return daemon.Generation(config, origin, policy, path, skip, strict=args.strict)

    return daemon.run_main(args, checks, load)


def cmd_clear(args: argparse.Namespace) -> int:
    """Issue 5: clear a sticky GPU fault (docs/xid.md); takes the state file's lock."""
    from agent.clear import ClearUsageError, clear
    from agent.logs import setup

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

    print(f"gpu-node-agent {version()}")
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    import yaml

    from agent.config import load_config

    if args.action == "validate":
        config, origin = load_config(args.file)
        resolve_policy(config, origin, config.allocation_path)
        _validate_ids(config.skip, [c.id for c in _registry()], f"{origin}: skip")
        print(f"{origin}: valid")
        return 0
    config, origin = load_config(args.config)
    resolve_policy(config, origin, config.allocation_path)
    print(f"# effective config ({origin or 'built-in defaults'})")
    sys.stdout.write(yaml.safe_dump(config.model_dump(), sort_keys=False))
    return 0


def _evaluation_options(cmd: argparse.ArgumentParser) -> None:
    """What `check` and `run` share: where the host is, which config, path, skips, strict."""
    cmd.add_argument("--config", help="config file (default /etc/gpu-node-agent/config.yaml)")
    where = cmd.add_mutually_exclusive_group()
    where.add_argument("--host-root", metavar="DIR", help="a bare tree (files only)")
    where.add_argument("--bundle", metavar="B", help="a bundle (directory or .tar.gz)")
    cmd.add_argument("--path", choices=PATHS, help="allocation path (default from config: dra)")
    cmd.add_argument("--skip", metavar="IDS", help="comma-separated check ids to skip")
    cmd.add_argument("--strict", action="store_true", help="warnings close the gate too")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="gpu-node-agent", description=__doc__.splitlines()[0])
    parser.add_argument("--debug", action="store_true", help="show tracebacks on internal errors")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)

    check = sub.add_parser("check", help="validate this host (or a bundle) for GPU work")
    _evaluation_options(check)
    check.add_argument("--only", metavar="IDS", help="comma-separated check ids to run")
    check.add_argument("--format", choices=("text", "json"), default="text")
    check.add_argument(
        "--apply", action="store_true", help="write the labels and condition to this Node"
    )
    check.set_defaults(func=cmd_check)

    col = sub.add_parser("collect", help="capture what the checks read into a bundle")
    col.add_argument("-o", "--output", metavar="DIR|FILE.tar.gz")
    col.add_argument("--config")
    col.add_argument("--host-root", metavar="DIR", help=argparse.SUPPRESS)
    col.set_defaults(func=cmd_collect)

    exp = sub.add_parser("explain", help="what a check verifies and how to fix it")
    exp.add_argument("id", nargs="?")
    exp.set_defaults(func=cmd_explain)

    run = sub.add_parser("run", help="the agent: re-run checks, serve metrics, notify systemd")
    _evaluation_options(run)
    run.add_argument("--listen-address", metavar="HOST:PORT", help="overrides run.listen_address")
    run.add_argument("--dry-run", action="store_true", help="compute Node changes, write none")
    # Tests: the NVML worker (simulated library) beside --host-root; a live host always has it.
    run.add_argument("--nvml", action="store_true", help=argparse.SUPPRESS)
    run.set_defaults(func=cmd_run)

    clr = sub.add_parser("clear", help="clear a sticky GPU fault (after a reset the agent missed)")
    clr.add_argument("target", metavar="index|uuid|pci|all")
    clr.add_argument("--config")
    clr.set_defaults(func=cmd_clear)

    ver = sub.add_parser("version", help="print the version")
    ver.set_defaults(func=cmd_version)

    cfg = sub.add_parser("config", help="validate or show the configuration")
    cfg_sub = cfg.add_subparsers(dest="action", parser_class=_Parser, required=True)
    val = cfg_sub.add_parser("validate", help="validate a config file")
    val.add_argument("file")
    show = cfg_sub.add_parser("show", help="print the effective config with defaults")
    show.add_argument("--config")
    cfg.set_defaults(func=cmd_config)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    from agent.errors import BundleError, ConfigError

    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    try:
        args = build_parser().parse_args(argv)
        if not getattr(args, "func", None):
            raise UsageError("a command is required: check, run, collect, explain, config, version")
        return int(args.func(args))
    except (UsageError, ConfigError, BundleError) as exc:
        print(f"gpu-node-agent: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if debug:
            raise
        print(f"gpu-node-agent: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
