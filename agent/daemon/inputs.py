"""What the command line hands `run` (agent/cli_run.py builds these): one validated
configuration at a time, and where each cycle's host comes from."""
from typing import Any, Callable, ContextManager, List, Optional, Protocol

from agent.hostview import FactOverlay
from agent.outputs.webconfig import WebConfig
from agent.records import record


class RunSettings(Protocol):
    """The `run:` settings the daemon reads (docs/metrics.md, docs/systemd.md); agent.config's
    RunConfig has them. Read-only properties, so the config record's fields match."""

    @property
    def listen_address(self) -> str: ...

    @property
    def web_config_file(self) -> Optional[str]: ...

    @property
    def textfile_dir(self) -> Optional[str]: ...

    @property
    def exit_on_new_driver(self) -> bool: ...

    @property
    def follow_driver_upgrade(self) -> bool: ...

    @property
    def event_driven(self) -> bool: ...

    @property
    def fast_interval(self) -> float: ...

    @property
    def slow_interval(self) -> float: ...

    @property
    def gpu_telemetry(self) -> bool: ...

    @property
    def check_details(self) -> bool: ...


class DaemonConfig(Protocol):
    """What the daemon reads of a configuration: its `run:` section. The whole config
    (agent.config.Config) belongs to the command line, which the daemon does not import
    (docs/architecture.md); the command line reads the rest (kube, nfd, gpu) itself."""

    @property
    def run(self) -> RunSettings: ...


@record
class Generation:
    """One validated configuration: what the loader returns, what SIGHUP replaces."""

    config: DaemonConfig  # an agent.config.Config, built by the command line
    origin: Optional[str]
    policy: Any  # checks.policy.ResolvedPolicy
    path: str
    skip: List[str]
    strict: bool = False
    web: Optional[WebConfig] = None


# open_host(generation) -> a context manager yielding the Host for one cycle
HostOpener = Callable[[Generation], ContextManager[Any]]


@record
class Source:
    """Where the host comes from; fixed for the life of the process. The command line builds
    it (agent/cli_run.py host_source), so the daemon never builds or names a Host itself
    (docs/architecture.md: the daemon does not import the host wing)."""

    open_host: HostOpener
    # The root whose /proc/devices is watched for an NVIDIA driver loaded after start; None
    # for a bundle (a recording has no driver to load).
    devices_root: Optional[str] = "/"
    # The long-lived GPU source (NvmlClient) when there is one: its counters go into each
    # Report (``stats``) and the daemon closes it when it stops.
    gpus: Any = None


def sticky_from_memory(host: Any, monitor: Any) -> FactOverlay:
    """The live host, with the sticky-fault fact taken from the XID monitor's memory: a fatal
    fault closes the gate at the next cycle even when the state file could not be written
    (read-only or full state directory); the file is only its copy across restarts."""

    def view(_name: str) -> Any:
        memory = getattr(monitor, "view", None)
        return memory() if memory is not None else None

    return FactOverlay(host, ("sticky",), view)
