"""Builds the Host for a command: the live machine, a bare tree, or a bundle."""
from contextlib import contextmanager
from typing import Any, Iterator, Optional

from agent.host import Host


def live_host(config: Any = None, gpus: Any = None) -> Host:
    # `gpus`: a long-lived source (run keeps one NvmlClient across cycles).
    from agent.kernel_source import since_boot_lines
    from agent.kube.facts import with_kube_facts  # node + runtimeclasses from the API
    from agent.live import LiveFacts, SubprocessCommands
    from agent.nvml_client import NvmlGpuSource
    from agent.state import sticky_path

    gpu = getattr(config, "gpu", None)
    gpus = gpus or NvmlGpuSource(
        deadline_s=getattr(gpu, "nvml_deadline_s", 10.0),
        first_deadline_s=getattr(gpu, "nvml_first_deadline_s", 45.0),
        maintenance_flag=getattr(gpu, "maintenance_flag", None),
    )
    return Host(
        "/", commands=SubprocessCommands(), gpus=gpus,
        facts=with_kube_facts(LiveFacts(sticky_path=sticky_path(config)), config),
        kmsg=since_boot_lines(run=SubprocessCommands().run),  # issue 5: NVRM lines since boot
        description="this host",
        live=True,
    )


def tree_host(root: str, gpus: Any = None) -> Host:
    from agent.live import TreeFacts

    return Host(root, facts=TreeFacts(root), gpus=gpus, description=f"host root {root}")


@contextmanager
def open_host(
    host_root: Optional[str] = None, bundle: Optional[str] = None, config: Any = None
) -> Iterator[Host]:
    if bundle is not None:
        from agent.bundle import load_bundle

        loaded = load_bundle(bundle)
        try:
            yield loaded.host
        finally:
            loaded.close()
    elif host_root is not None:
        yield tree_host(host_root)
    else:
        yield live_host(config)
