"""The one interface every output implements: text, JSON, the metrics endpoint, the
node_exporter textfile, the NFD feature file and the Node publisher.

An output consumes a Report and nothing else (agent/report.py carries the GPU snapshot, the
NVML counters, the XID counts and the run's timestamps), so one cycle's value renders the same
everywhere (docs/architecture.md). ``publish`` is called once per Report, from the daemon's
cycle for the fast outputs (cached bytes, a local file) and from its output pump for the slow
ones (the API, the NFD file); ``close`` once at the end, and must not raise.
"""
from typing import Any, Protocol, runtime_checkable

from agent.report import Report


@runtime_checkable
class Output(Protocol):
    def publish(self, report: Report) -> Any:
        """Render or send ``report``; what it returns is the output's own (a status)."""
        ...

    def close(self) -> None:
        """Release what the output holds (sockets, sessions); safe to call once at exit."""
        ...
