"""The commands beside `check` and `run`: collect, explain, clear, version, config."""
import argparse
import time

from agent.cli_common import emit, load_config, registry, resolve_policy, validate_ids
from agent.errors import ConfigError, UsageError


def cmd_collect(args: argparse.Namespace) -> int:
    from agent.cli_common import nvml_library_for
    from agent.cli_kube import ApiWiring
    from agent.host.build import open_host
    from agent.host.collect import collect

    config, origin = load_config(args.config)
    try:  # NVML from the GPU Operator's driver root when the policy says it owns the driver
        library = nvml_library_for(resolve_policy(config, origin, config.allocation_path))
    except ConfigError:  # a broken policy is `check`'s to report; collect still captures
        library = None
    out = args.output or time.strftime("gpu-node-agent-bundle-%Y%m%dT%H%M%SZ.tar.gz", time.gmtime())
    # collect refuses a non-empty directory or an existing file before capturing anything
    # (OutputError, a ConfigError: exit 2 with one line).
    api = ApiWiring()  # the Node and RuntimeClasses, as `check` reads them
    with open_host(args.host_root, None, config, nvml_library=library) as opened:
        try:
            host = api.wrap(opened, config) if opened.is_live else opened
            if opened.is_live and getattr(args, "with_workload", False):
                from agent.host.workload import with_workload

                with_workload(opened, config, force=True)  # docs/workload.md
            target = collect(host, registry(config), out)
        finally:
            api.close()
    emit(f"bundle written to {target}\n")
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    from agent.explain import explain_lines, list_lines, policy_citations
    from checks.policy import load_policy

    checks = {c.id: c for c in registry()}
    if args.id is None:
        emit("".join(f"{line}\n" for line in list_lines(list(checks.values()))))
        return 0
    check = checks.get(args.id)
    if check is None:
        raise UsageError(f"unknown check id {args.id} (known: {', '.join(checks)})")
    config, origin = load_config(args.config)
    policy = resolve_policy(config, origin, config.allocation_path).policy
    lines = explain_lines(
        check,
        policy,
        load_policy(config.policy_version),
        config.model_dump(),
        origin,
        policy_citations(config.policy_version),
    )
    emit("".join(f"{line}\n" for line in lines))
    return 0


def cmd_clear(args: argparse.Namespace) -> int:
    """Clear a sticky GPU fault (docs/xid.md); takes the state file's lock."""
    from agent.logs import setup
    from agent.xid.clear import clear

    config, _ = load_config(args.config)
    setup(getattr(args, "debug", False))
    try:  # a target that names no GPU: ClearUsageError, a UsageError (exit 2)
        removed = clear(args.target, config.state_dir)
    except OSError as exc:  # not root, read-only /var/lib: say where, not a traceback
        raise UsageError(f"clear: cannot update the state in {config.state_dir}: {exc}") from None
    print(f"cleared {len(removed)} sticky fault(s) for {args.target} in {config.state_dir}")
    return 0


def cmd_version(args: argparse.Namespace) -> int:
    from agent.version import version

    emit(f"gpu-node-agent {version()}\n")
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    import yaml

    from agent.config import load_config

    if args.action == "validate":
        from agent.config import run_file_problems

        config, origin = load_config(args.file)
        resolve_policy(config, origin, config.allocation_path)
        validate_ids(config.skip, [c.id for c in registry(config)], f"{origin}: skip")
        problems = run_file_problems(config, origin)
        if problems:  # everything `run` would refuse at start, not only the first
            raise ConfigError("; ".join(problems))
        emit(f"{origin}: valid\n")
        return 0
    config, origin = load_config(args.config)
    resolve_policy(config, origin, config.allocation_path)
    emit(
        f"# effective config ({origin or 'built-in defaults'})\n"
        + yaml.safe_dump(config.model_dump(), sort_keys=False)
    )
    return 0
