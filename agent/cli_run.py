"""Assembles `gpu-node-agent run` (agent/daemon/service.py) from the command line's arguments."""
import contextlib
import logging
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Iterator, List, Sequence, cast

from agent.daemon.inputs import Generation, Source
from agent.daemon.service import Daemon
from agent.logs import log
from agent.model import Check

if TYPE_CHECKING:
    from agent.config import Config


def whole_config(gen: Generation) -> "Config":
    """A Generation's whole config. The daemon types it by the little it reads (DaemonConfig);
    every Generation is built by agent/cli.py's loader from an agent.config.Config."""
    return cast("Config", gen.config)


def main(args: Any, checks: Sequence[Check], loader: Callable[[], Generation]) -> int:
    """`gpu-node-agent run`, from the command line's parsed args: the NVML client, the Node
    outputs and the XID monitor for a live host, then the Daemon until SIGTERM."""
    from agent.errors import ConfigError
    from agent.logs import setup
    from agent.version import version

    logger = setup(debug=getattr(args, "debug", False))
    gen = loader()  # a bad config at start is exit 2 (ConfigError), not a log line
    from agent.cli_common import nvml_library_for

    current = [gen]  # the generation in force: where NVML is loaded from follows its policy
    library = nvml_library_for(lambda: current[0].policy)
    gpus = None
    if (args.host_root is None and args.bundle is None) or getattr(args, "nvml", False):
        from agent.nvml.client import NvmlClient

        g = whole_config(gen).gpu
        gpus = NvmlClient(deadline_s=g.nvml_deadline_s, first_deadline_s=g.nvml_first_deadline_s,
                          maintenance_flag=g.maintenance_flag, library=library)
    first = [gen]

    def load_once() -> Generation:  # the first call reuses the validated start config
        current[0] = first.pop() if first else loader()
        return current[0]

    live = args.host_root is None and args.bundle is None
    from agent.cli_kube import ApiWiring

    api = ApiWiring()  # one API session for the process: the facts and the publisher share it
    # A bundle has no /proc/devices to watch for a driver loaded after start.
    source = Source(host_opener(args, gpus, api),
                    None if args.bundle is not None else (args.host_root or "/"), gpus)
    try:
        daemon = Daemon(checks, load_once, source, version(),
                        logger, listen_override=getattr(args, "listen_address", None),
                        outputs_factory=_node_outputs(args, live, api),
                        xid_monitor=_xid_monitor(gen, logger, gpus) if live else None)
    except OSError as exc:  # a WebConfigError is a ConfigError already (exit 2)
        listen = getattr(args, "listen_address", None) or gen.config.run.listen_address
        raise ConfigError(f"cannot listen on {listen}: {exc.strerror or exc}") from None
    return daemon.serve()


def host_opener(args: Any, gpus: Any, api: Any) -> Callable[[Generation], ContextManager[Any]]:
    """The Host of one cycle for a Generation: the bundle or tree named on the command line,
    else the live machine with the API facts of this process's session (``api``, an
    agent.cli_kube.ApiWiring), so the cache and the connection outlive the cycle's Host."""

    @contextlib.contextmanager
    def open_for(gen: Generation) -> Iterator[Any]:
        from agent.host.build import live_host, open_host, tree_host

        if args.bundle is not None:
            with open_host(bundle=args.bundle) as host:
                yield host
        elif args.host_root is not None:
            yield tree_host(args.host_root, gpus=gpus)
        else:
            from agent.host.workload import with_workload

            # gpu-workload is bootstrap-only: its container runs in the first cycle (and
            # after a reload), where workload.paths opts the path in (docs/workload.md).
            host, _ = with_workload(live_host(gen.config, gpus=gpus), gen.config)
            yield api.wrap(host, gen.config)

    return open_for


def _node_outputs(args: Any, live: bool, api: Any) -> Callable[[Generation], List[Any]]:
    """The Node verdict (labels, condition, NFD file: agent/outputs/node/publish.py) for each
    Report, for the live machine only. A fixture (--bundle/--host-root) is never published, whatever
    the config names: "live" is the source type, as for `check --apply` (a bundle's verdict on
    this machine's Node, or in its NFD directory, would be a verdict about another host)."""

    def make(gen: Generation) -> List[Any]:
        kube, nfd = whole_config(gen).kube, whole_config(gen).nfd
        if not live or not (kube.enabled or nfd.enabled):
            return []
        if not kube.enabled:  # the NFD file alone: no API session is opened for it
            from agent.outputs.nfd_output import NfdOutput

            return [NfdOutput(gen.config, dry_run=bool(getattr(args, "dry_run", False)))]
        from agent.outputs.node.publish import Publisher

        # The session for this generation's kube settings: the same one the host facts use
        # (a reload with other settings gets a new one, agent/cli_kube.py).
        return [Publisher(gen.config, dry_run=bool(getattr(args, "dry_run", False)),
                          session=api.session(gen.config))]

    return make


def _xid_monitor(gen: Generation, logger: logging.Logger, nvml: Any = None) -> Any:
    """Sticky XID/ECC faults and XID counters from the kernel log (live host only: it writes
    /var/lib/gpu-node-agent and reads /dev/kmsg)."""
    try:
        from agent.xid.monitor import start_for_daemon

        # Kernel log plus NVML XID events from the NVML client's one worker (NVML misses
        # 79/119/120, the kernel log misses nothing but arrives later; agent/xid/events.py
        # de-duplicates them).
        return start_for_daemon(gen.config, gen.policy.policy.xid, nvml=nvml)
    except Exception as exc:  # no kernel log, no state dir: the rest of the agent still runs
        log(logger, logging.ERROR, "XID monitor unavailable", error=f"{type(exc).__name__}: {exc}")
        return None
