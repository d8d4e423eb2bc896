"""Builds the Host for a command: the live machine, a bare tree, or a bundle.

Only the command line (agent/cli.py, agent/cli_run.py) calls these; it puts the API facts
(`node`, `runtimeclasses`) in front of a live Host itself (agent/cli_kube.py), so this input
side never imports the API side (docs/architecture.md, the allowed arrows)."""
from contextlib import contextmanager
from typing import Any, Iterator, Optional

from agent.host.seam import Host

# The fix for a fact a bundle or a bare tree does not hold: capture it, do not repair a host.
BUNDLE_CAPTURE_HINT = (
    "Not captured in this bundle: {missing}. Capture a new bundle on that host with "
    "`sudo gpu-node-agent collect -o FILE.tar.gz` (root reads the kernel log, /dev/nvidia* and "
    "NVML; the kubelet's kubeconfig gives the Node and RuntimeClasses), then run "
    "`gpu-node-agent check --bundle FILE.tar.gz`."
)
TREE_CAPTURE_HINT = (
    "Not available under --host-root: {missing} (a bare tree has files only: no commands, "
    "kernel log, NVML or API). Run `sudo gpu-node-agent collect -o FILE.tar.gz` on that host "
    "and check the bundle instead."
)


def live_host(config: Any = None, gpus: Any = None, nvml_library: Any = None) -> Host:
    # `gpus`: a long-lived source (run keeps one NvmlClient across cycles). `nvml_library`:
    # the libnvidia-ml the NVML worker loads (agent/nvml/process.py; None: the soname).
    from agent.host.live import LiveFacts
    from agent.nvml.client import NvmlGpuSource
    from agent.safeio.commands import SubprocessCommands
    from agent.xid.kernel_source import since_boot_lines
    from agent.xid.state import sticky_path

    gpu = getattr(config, "gpu", None)
    gpus = gpus or NvmlGpuSource(
        deadline_s=getattr(gpu, "nvml_deadline_s", 10.0),
        first_deadline_s=getattr(gpu, "nvml_first_deadline_s", 45.0),
        maintenance_flag=getattr(gpu, "maintenance_flag", None),
        library=nvml_library,
    )
    return Host(
        "/", commands=SubprocessCommands(), gpus=gpus,
        facts=LiveFacts(sticky_path=sticky_path(config)),
        kmsg=since_boot_lines(run=SubprocessCommands().run),  # NVRM lines since boot (docs/xid.md)
        description="this host",
        live=True,
    )


def tree_host(root: str, gpus: Any = None) -> Host:
    from agent.host.tree import TreeFacts

    host = Host(root, facts=TreeFacts(root), gpus=gpus, description=f"host root {root}")
    host.capture_hint = TREE_CAPTURE_HINT  # type: ignore[attr-defined]
    return host


@contextmanager
def open_host(
    host_root: Optional[str] = None, bundle: Optional[str] = None, config: Any = None,
    nvml_library: Any = None,
) -> Iterator[Host]:
    if bundle is not None:
        from agent.host.bundle import load_bundle

        loaded = load_bundle(bundle)
        # What a result's fix says when this bundle lacks the source it needed (agent/engine.py).
        loaded.host.capture_hint = BUNDLE_CAPTURE_HINT  # type: ignore[attr-defined]
        try:
            yield loaded.host
        finally:
            loaded.close()
    elif host_root is not None:
        yield tree_host(host_root)
    else:
        yield live_host(config, nvml_library=nvml_library)
