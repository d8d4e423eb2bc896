"""Builds the Host for a command: the live machine, a bare tree, or a bundle."""
from contextlib import contextmanager
from typing import Any, Iterator, Optional

from agent.host import Host


def live_host(config: Any = None) -> Host:
    from agent.live import LiveFacts, SubprocessCommands

    return Host("/", commands=SubprocessCommands(), facts=LiveFacts(), description="this host")


def tree_host(root: str) -> Host:
    from agent.live import TreeFacts

    return Host(root, facts=TreeFacts(root), description=f"host root {root}")


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
