"""The command line: the composition root.

Only it (agent/cli*.py) imports the check registry; it builds the Host, resolves the Node
identity and the one API session (agent/cli_kube.py) and hands them down.

Exit codes (README "Exit codes"): 0 gate open and everything asked for done, 1 gate closed,
2 usage or config error (every bad value a user can type: one line, no traceback), 3 internal
error only (one line; the traceback only with --debug), 4 gate open but the verdict was not
fully written.
"""
import argparse
import gc
import os
import sys
import time
from typing import TYPE_CHECKING, Any, List, Optional, Sequence, Tuple

from agent.cli_commands import cmd_clear, cmd_collect, cmd_config, cmd_explain, cmd_version
from agent.cli_common import (
    emit,
    ids,
    load_config,
    nvml_library_for,
    registry,
    validate_ids,
)
from agent.cli_common import resolve_policy as resolve_policy  # public: tests and tools use it
from agent.cli_parser import build_parser as _build_parser
from agent.errors import EXIT_CLOSED as EXIT_CLOSED  # the exit codes: agent/errors.py's table
from agent.errors import EXIT_INTERNAL as EXIT_INTERNAL
from agent.errors import EXIT_NOT_WRITTEN as EXIT_NOT_WRITTEN
from agent.errors import EXIT_OPEN as EXIT_OPEN
from agent.errors import EXIT_USAGE as EXIT_USAGE
from agent.errors import AgentError, ConfigError, UsageError
from agent.records import replace

if TYPE_CHECKING:
    from agent.config import Config
    from checks.policy import ResolvedPolicy

Evaluation = Tuple["Config", Optional[str], str, List[str], "ResolvedPolicy"]


def _registry(args: Any = None) -> Any:  # looked up at each call: a test can replace it
    from agent.cli_common import registry_for  # with the site's checks (docs/site-checks.md)

    return registry() if args is None else registry_for(args)


# What `--help` says to an operator (the module docstring is for whoever reads the code).
DESCRIPTION = ("Validate an NVIDIA GPU host against a policy before it takes Kubernetes GPU work, "
               "and keep validating it while it runs.")


def build_parser() -> argparse.ArgumentParser:
    """The parser, each command bound to the function of that name in this module now."""
    commands = {"check": cmd_check, "collect": cmd_collect, "explain": cmd_explain,
                "run": cmd_run, "clear": cmd_clear, "version": cmd_version, "config": cmd_config}
    return _build_parser(commands, DESCRIPTION)


def _evaluation(args: argparse.Namespace, checks: Sequence[Any]) -> Evaluation:
    """(config, origin, path, skip ids, resolved policy) for `check` and `run`; raises
    ConfigError/UsageError (exit 2) on a bad file, path or id."""
    if args.config is None and (args.bundle or args.host_root):
        # A bundle or tree is evaluated on its own terms: this machine's default config is
        # not mixed in (pass --config to apply one). See docs/config.md.
        from agent.config import Config

        config, origin = Config(), None  # type: Config, Optional[str]
    else:
        config, origin = load_config(args.config)
    path = args.path or config.allocation_path
    skip = ids(args.skip) + list(config.skip)
    validate_ids(skip, [c.id for c in checks], "--skip" if args.skip else f"{origin}: skip")
    return config, origin, path, skip, resolve_policy(config, origin, path)


def cmd_check(args: argparse.Namespace) -> int:
    from agent.cli_kube import ApiWiring
    from agent.engine import Engine, policy_version_of
    from agent.host.build import open_host
    from agent.outputs.render import render_json, render_text
    from agent.report import build_report, min_healthy_of
    from agent.version import version

    checks = _registry(args)
    config, origin, path, skip, policy = _evaluation(args, checks)
    only = ids(args.only) or None
    validate_ids(only or [], [c.id for c in checks], "--only")
    api = ApiWiring()  # the one session of this process (agent/cli_kube.py)
    # On a GPU Operator-managed driver, NVML is read from the operator's driver root.
    live = args.host_root is None and args.bundle is None
    if live:  # a kubeconfig the config names must exist: exit 2 naming the field (no search)
        api.require_configured_kubeconfig(config, origin)
    with open_host(args.host_root, args.bundle, config,
                   nvml_library=nvml_library_for(policy) if live else None) as opened:
        host = api.wrap(opened, config) if opened.is_live else opened
        if opened.is_live:  # gpu-workload's action, where workload.paths opts the path in
            from agent.host.workload import with_workload

            with_workload(opened, config)
        try:
            results = Engine(checks).run(host, policy, only=only, skip=skip)
            report = build_report(
                results, path, args.strict, host.description, time.time(), version(),
                policy_version=policy_version_of(policy), gpus=opened.gpus_if_fetched(),
                min_healthy_gpus=min_healthy_of(policy),
            )
            # labels, condition
            kube_lines = _kube_verdict(args, config, report, host, api)
        finally:
            api.close()
        if kube_lines is not None:
            report = replace(report, context={**report.context, "kube": kube_lines[1]})
    # `--apply`: each write attempted and its answer (docs/json-output.md `publish`)
    publish = kube_lines[2] if kube_lines is not None and args.apply else None
    if args.format == "json" and publish is not None:
        import json

        from agent.outputs.render import report_dict

        emit(json.dumps({**report_dict(report), "publish": publish}, indent=2, default=str) + "\n")
    elif args.format == "json":
        emit(render_json(report))
    else:
        colour = sys.stdout.isatty() and os.environ.get("NO_COLOR") is None
        text = render_text(report, colour=colour)
        if kube_lines is not None:  # before the gate line, which stays the last line
            head, _, gate_line = text.rstrip("\n").rpartition("\n")
            verdict = "".join(f"  {line}\n" for line in ["node verdict:", *kube_lines[0]])
            text = f"{head}\n{verdict}{gate_line}\n"
        emit(text)
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


def cmd_run(args: argparse.Namespace) -> int:
    """The agent (docs/metrics.md, docs/systemd.md). The loader validates a config exactly as
    a start does, so SIGHUP with a bad file keeps the running one."""
    from agent.daemon.inputs import Generation

    checks = _registry(args)

    def load() -> Any:
        from agent.config import run_file_problems

        config, origin, path, skip, policy = _evaluation(args, checks)
        problems = run_file_problems(config, origin)
        if problems:  # at start: exit 2; on SIGHUP: the running config is kept
            raise ConfigError(problems[0])
        return Generation(config, origin, policy, path, skip, strict=args.strict)

    from agent import cli_run

    return cli_run.main(args, checks, load)


def main(argv: Optional[Sequence[str]] = None) -> int:
    words = list(argv if argv is not None else sys.argv[1:])
    # Anywhere before a `--` (a value such as `--only --debug` is refused by the parser anyway).
    debug = "--debug" in (words[: words.index("--")] if "--" in words else words)
    collecting = gc.isenabled()
    try:
        args = build_parser().parse_args(words)
        if not getattr(args, "func", None):
            raise UsageError("a command is required: check, run, collect, explain, config, version")
        if args.command == "check":
            # A one-shot check imports ~200 modules and builds its policy and report: long-lived
            # objects the cyclic collector would scan again and again for nothing to free
            # (Python docs, gc: collections run as allocations pass the thresholds), ~8 ms of
            # a ~130 ms command (bench/bench_footprint.py). Its inputs are capped, so what
            # cyclic garbage it leaves is bounded; the process ends with the command. `run`
            # keeps the collector (its start-up heap is frozen instead: agent/daemon).
            gc.disable()
        return int(args.func(args))
    except BrokenPipeError:  # the reader went away (`| head`): nothing left to say
        emit("")
        return EXIT_OPEN
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # the one place an error becomes an exit code
        code = exc.exit_code if isinstance(exc, AgentError) else EXIT_INTERNAL
        if code != EXIT_INTERNAL:  # the user's to fix: one line, never a traceback
            print(f"gpu-node-agent: error: {_one_line(exc)}", file=sys.stderr)
            return code
        if debug:
            raise
        print(
            f"gpu-node-agent: internal error: {type(exc).__name__}: {_one_line(exc)}",
            file=sys.stderr,
        )
        return EXIT_INTERNAL
    finally:
        if collecting:  # as the caller had it (a test calls main() many times in one process)
            gc.enable()


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


if __name__ == "__main__":
    sys.exit(main())
