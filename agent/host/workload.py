"""gpu-workload's seam: the one action a check asks of the host, a GPU container started through
containerd, answered as a record (a plain dict) under the host fact ``workload``.

The check (checks/workload/gpu_workload.py) stays a pure function of that record: the live
Host gets a ``WorkloadFacts`` in front of its facts only where the workload was asked for
(`check`/`run` with the path in ``workload.paths``, `collect --with-workload`); a bundle replays
the record from host.json like any fact; a bare tree (--host-root) has none ("not run").

Two routes (docs/workload.md): before the kubelet runs, CRI (agent/host/workload_cri.py: a pod
sandbox with the path's runtime handler, or a container with the CDI device request, as a pod
gets them); after join, containerd's native API through `ctr` in a namespace of our own
(agent/host/workload_native.py), which the kubelet never lists, so it never removes it.
Every object carries the label ``gpu-node-agent.workload=1``; each run first removes
leftovers carrying it (a run killed by SIGKILL leaves them to the next one).
"""
import os
from typing import Any, Callable, Dict, Optional, Protocol, Tuple

from agent.host.workload_record import LABEL, LABEL_VALUE, Attempt, WorkloadSpec
from agent.model import DRA_PATHS

__all__ = ["LABEL", "LABEL_VALUE", "Attempt", "WorkloadFacts", "WorkloadSpec", "run_workload",
           "spec_from_config", "with_workload"]

class WorkloadRoute(Protocol):
    def run(self, spec: WorkloadSpec) -> Dict[str, Any]: ...


def mode_for(path: str) -> str:
    return "cdi" if path in DRA_PATHS else "handler"


def spec_from_config(config: Any) -> Optional[WorkloadSpec]:
    """The spec for the config's allocation path, or None when the path is not opted in."""
    wl = getattr(config, "workload", None)
    path = str(getattr(config, "allocation_path", ""))
    if wl is None or path not in list(wl.paths):
        return None
    return WorkloadSpec(
        path=path, mode=mode_for(path), handler=config.containerd.handler, image=wl.image,
        command=list(wl.command), cdi_device=wl.cdi_device, socket=wl.socket,
        namespace=wl.namespace, ctr=wl.ctr, containerd_config=config.containerd.config_path,
        step_deadline_s=wl.step_deadline_s, cleanup_deadline_s=wl.cleanup_deadline_s,
        kubelet_socket=wl.kubelet_socket, route=wl.route,
    )


def choose_route(spec: WorkloadSpec) -> str:
    """CRI before join; native after: a running kubelet removes CRI sandboxes it did not
    create (kubelet's pod garbage collection), so CRI is only safe before it runs."""
    if spec.route in ("cri", "native"):
        return spec.route
    return "native" if os.path.exists(spec.kubelet_socket) else "cri"


def run_workload(spec: WorkloadSpec,
                 routes: Optional[Dict[str, Callable[[], WorkloadRoute]]] = None) -> Dict[str, Any]:
    route = choose_route(spec)
    if not os.path.exists(spec.socket):
        attempt = Attempt(spec, route)
        attempt.fail("runtime", f"containerd socket {spec.socket} not found")
        return attempt.record()
    if routes is not None:
        return routes[route]().run(spec)
    if route == "cri":
        from agent.host.workload_cri import CriRoute

        return CriRoute().run(spec)
    from agent.host.workload_native import NativeRoute

    return NativeRoute().run(spec)


class WorkloadFacts:
    """A FactSource answering ``workload`` by running it (once per Host), every other fact from
    ``inner``. Installed only where the workload was asked for."""

    def __init__(self, inner: Any, spec: WorkloadSpec,
                 runner: Callable[[WorkloadSpec], Dict[str, Any]] = run_workload) -> None:
        self.inner, self.spec, self.runner = inner, spec, runner
        self._record: Optional[Dict[str, Any]] = None

    def fact(self, name: str) -> Any:
        if name != "workload":
            return self.inner.fact(name) if self.inner is not None else None
        if self._record is None:
            try:
                self._record = self.runner(self.spec)
            except Exception as exc:  # an internal error is a record the check reports
                attempt = Attempt(self.spec, "unknown")
                attempt.fail("tool", f"{type(exc).__name__}: {exc}")
                self._record = attempt.record()
        return self._record


def with_workload(host: Any, config: Any, force: bool = False) -> Tuple[Any, bool]:
    """Put WorkloadFacts in front of a live Host's facts when the config opts the path in
    (or ``force``, `collect --with-workload`, for a path not listed). Returns (host, installed)."""
    spec = spec_from_config(config)
    if spec is None and force and getattr(config, "workload", None) is not None:
        path = str(config.allocation_path)
        wl = config.workload
        spec = WorkloadSpec(
            path=path, mode=mode_for(path), handler=config.containerd.handler, image=wl.image,
            command=list(wl.command), cdi_device=wl.cdi_device, socket=wl.socket,
            namespace=wl.namespace, ctr=wl.ctr, containerd_config=config.containerd.config_path,
            step_deadline_s=wl.step_deadline_s, cleanup_deadline_s=wl.cleanup_deadline_s,
            kubelet_socket=wl.kubelet_socket, route=wl.route)
    if spec is None or not getattr(host, "is_live", False):
        return host, False
    host._facts = WorkloadFacts(host._facts, spec)  # the seam's own slot (agent/host/seam.py)
    return host, True
