"""What the commands of the command line share: stdout that tolerates a closed pipe, the
check registry, the config and the resolved policy. Their errors are agent/errors.py's."""
import os
import sys
from typing import TYPE_CHECKING, Any, List, Optional, Sequence, Tuple

from agent.errors import UsageError

if TYPE_CHECKING:
    from agent.config import Config
    from checks.policy import ResolvedPolicy


def emit(text: str) -> None:
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


def ids(text: Optional[str]) -> List[str]:
    return [p.strip() for p in (text or "").split(",") if p.strip()]


def registry(config: Optional["Config"] = None) -> Any:
    """The built-in checks, then the site's own (docs/site-checks.md) when ``config`` names a
    site-check directory."""
    from checks.registry import ALL_CHECKS

    site_dir = config.site_checks.dir if config is not None else None
    if not site_dir:
        return ALL_CHECKS
    from checks.site.loader import load_site_checks

    return tuple(ALL_CHECKS) + tuple(load_site_checks(site_dir))


def registry_for(args: Any) -> Any:
    """`check` and `run`'s registry: with the config they evaluate (as cli.py's _evaluation
    picks it: a bundle or tree without --config gets the defaults, so no site checks)."""
    if args.config is None and (getattr(args, "bundle", None) or getattr(args, "host_root", None)):
        return registry()
    return registry(load_config(args.config)[0])


def load_config(path: Optional[str]) -> Tuple["Config", Optional[str]]:
    from agent.config import load_config

    config, _origin = load_config(path)
    return config, _origin


def resolve_policy(config: "Config", origin: Optional[str], path: str) -> "ResolvedPolicy":
    from agent.config import policy_error
    from checks.policy import ResolvedPolicy, load_policy

    try:
        policy = load_policy(config.policy_version, config.policy)
    except Exception as exc:  # schema.ValidationError or ValueError: a config error
        raise policy_error(exc, origin or "built-in config") from None
    return ResolvedPolicy(policy, path, settings=config.model_dump())


def nvml_library_for(policy: Any) -> Any:
    """What the NVML worker loads for a resolved policy: the GPU Operator's driver root's
    libnvidia-ml when the operator installs the driver on this path (searched anew before each
    snapshot: agent/host/driver_root.py), else None (pynvml's soname from the host's loader
    path). ``policy`` is a ResolvedPolicy, or a callable returning the current one (`run`)."""
    from agent.host.driver_root import nvml_library, operator_driver_root

    if callable(policy):
        return nvml_library(policy)
    return nvml_library(lambda: policy) if operator_driver_root(policy) else None


def validate_ids(ids: Sequence[str], known: Sequence[str], flag: str) -> None:
    unknown = [i for i in ids if i not in known]
    if unknown:
        raise UsageError(
            f"{flag}: unknown check id {', '.join(unknown)} (see `gpu-node-agent explain`)"
        )
