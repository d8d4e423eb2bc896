"""The pieces of one `run` cycle around the engine: which GPU snapshot the Report carries,
which XID counts, and the log lines for what changed since the last Report."""
import logging
from typing import Any, Collection, Dict, Mapping, Optional, Sequence, Tuple

from agent.daemon.parts import xid_counts_of
from agent.logs import log
from agent.model import CheckResult, Status
from agent.report import NodeFacts, Report

TIMED_OUT_SNAPSHOT: Mapping[str, Any] = {
    "schema_version": 1, "gpus": [],
    "error": {"kind": "timeout", "message": "a GPU check timed out"},
}


def cycle_snapshot(host: Any, gpu_checks: Collection[str], results: Sequence[CheckResult],
                   previous: Optional[Mapping[str, Any]]) -> Optional[Mapping[str, Any]]:
    """The GPU snapshot the GPU checks of this cycle saw (the Host takes it once and keeps
    it: agent/host/seam.py), so the metrics never cost an NVML call of their own. No GPU check
    ran: keep the previous one. A GPU check timed out: it is still inside host.gpus(), so
    nothing may wait for it; report NVML as timed out (no GPU series, nvml_up 0), as the NVML
    client does. A GPU check ran without asking for the snapshot: keep the previous one."""
    ran = [r for r in results if r.id in gpu_checks and r.status != Status.SKIP]
    if not ran:
        return previous
    if any(r.details.get("timed_out") for r in ran):
        return dict(TIMED_OUT_SNAPSHOT)
    fetched = getattr(host, "gpus_if_fetched", None)
    return fetched(previous) if fetched is not None else previous


def cycle_xid_counts(monitor: Any, results: Sequence[CheckResult]) -> Dict[Tuple[str, str], int]:
    """The live monitor's counters (kernel log + NVML events, de-duplicated), else the
    gpu-xid check's counts (a bundle or tree: no monitor runs there)."""
    if monitor is not None:
        try:
            return {(str(g), str(c)): int(n) for (g, c), n in monitor.counter.counts().items()}
        except Exception:  # metrics must render whatever the monitor's state
            return {}
    return xid_counts_of(next((r for r in results if r.id == "gpu-xid"), None))


def log_changes(logger: logging.Logger, previous: Optional[Report], report: Report) -> None:
    before = {r.id: r.status for r in previous.results} if previous else {}
    for r in report.results:
        if previous is not None and before.get(r.id) != r.status:
            log(logger, logging.INFO, "check changed", check=r.id,
                old=str(before.get(r.id, "none")), new=str(r.status), summary=r.summary)
    if previous is not None and previous.gate.open != report.gate.open:
        log(logger, logging.WARNING if not report.gate.open else logging.INFO,
            "gate changed", path=report.path, open=report.gate.open,
            blocking=",".join(report.gate.blocking))


def node_facts(outputs: Sequence[Any]) -> Optional[NodeFacts]:
    """The Node publisher's last attempt (agent/outputs/node/publish.py ``facts``: replaced
    whole by the output thread, so never read half-written); None without a Node output."""
    for out in outputs:
        facts = getattr(out, "facts", None)
        if isinstance(facts, NodeFacts):
            return facts
    return None
