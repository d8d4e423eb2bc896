"""Outputs that consume a Report: text for people, JSON (schema 1, docs/json-schema.md)."""
import json
from typing import Any, Dict, List, TextIO

from agent.gpu_health import GpuHealth
from agent.model import DRA_PATHS, Status
from agent.report import Report

JSON_SCHEMA_VERSION = 1

_COLOURS = {
    Status.PASS: "\033[32m",
    Status.WARN: "\033[33m",
    Status.FAIL: "\033[31m",
    Status.UNKNOWN: "\033[35m",
    Status.SKIP: "\033[2m",
}
_RESET = "\033[0m"
NEEDS_FIX = (Status.WARN, Status.FAIL, Status.UNKNOWN)


def report_dict(report: Report) -> Dict[str, Any]:
    """JSON schema 1. Fields may be added; none may be renamed or removed."""
    return {
        "schema": JSON_SCHEMA_VERSION,
        "path": report.path,
        "policy_version": report.policy_version,
        "strict": report.strict,
        "host": report.host,
        "agent_version": report.agent_version,
        "generated_at": report.generated_at,
        "gate": {"open": report.gate.open, "blocking": list(report.gate.blocking)},
        "gates": {
            p: {"open": g.open, "blocking": list(g.blocking)} for p, g in report.gates.items()
        },
        "checks": [
            {
                "id": r.id,
                "title": r.title,
                "severity": str(r.severity),
                "status": str(r.status),
                "summary": r.summary,
                "remediation": r.remediation,
                "gates": list(r.gates),
                "details": r.details,
                "duration_s": r.duration_s,
                # For a skip: not-applicable, input-missing, configured or needs:<id>.
                "skip": r.skip,
                # For warn/fail/unknown: which declared failure (docs/checks.md#<id>), or null.
                "code": r.code,
                # Paths on which this check decides differently (each gate uses its own).
                "by_path": {
                    p: {
                        "status": str(o.status),
                        "summary": o.summary,
                        "remediation": o.remediation,
                        "skip": o.skip,
                        "code": o.code,
                    }
                    for p, o in r.by_path.items()
                },
            }
            for r in report.results
        ],
        **({"gpus": gpus_dict(report.health, report.path)} if report.health is not None else {}),
        **({"context": dict(report.context)} if report.context else {}),
    }


def gpus_dict(health: GpuHealth, path: str) -> Dict[str, Any]:
    """Per-GPU health (agent/gpu_health.py; docs/json-output.md `gpus`)."""
    return {
        "min_healthy_gpus": health.min_healthy if health.min_healthy is not None else "all",
        "required": health.required,
        "healthy": health.healthy_count,
        "total": len(health.gpus),
        # the unhealthy GPUs leave the gate open (never on a DRA path: advisory there)
        "tolerated": health.tolerates_on(path),
        "advisory": path in DRA_PATHS,
        "devices": [
            {"index": g.index, "uuid": g.uuid, "pci_bus_id": g.pci_bus_id, "in_nvml": g.in_nvml,
             "healthy": g.healthy, "failing": list(g.failing)}
            for g in health.gpus
        ],
    }


def render_json(report: Report) -> str:
    return json.dumps(report_dict(report), indent=2, sort_keys=False, default=str) + "\n"


def render_text(report: Report, colour: bool = False) -> str:
    width = max((len(r.id) for r in report.results), default=10)
    lines: List[str] = [f"gpu-node-agent check: {report.host}, allocation path {report.path}"]
    for r in report.results:
        loud = r.status in (Status.FAIL, Status.UNKNOWN)
        label = str(r.status).upper() if loud else str(r.status)
        label = f"{label:<7}"
        if colour:
            label = f"{_COLOURS[r.status]}{label}{_RESET}"
        lines.append(f"  {label} {r.id:<{width}}  {r.summary}")
        if r.status in NEEDS_FIX and r.remediation:
            lines.append(f"  {'':<7} {'':<{width}}  fix: {r.remediation}")
    health = report.health
    if health is not None and health.unhealthy:  # which GPU fails which check, one line
        bad = "; ".join(
            (f"GPU {g.index} ({g.name})" if g.index is not None else f"GPU {g.name}")
            + f": {', '.join(g.failing)}" for g in health.unhealthy)
        kept = (f" (min_healthy_gpus {health.required}: the gate tolerates them)"
                if health.tolerates_on(report.path) else "")
        lines.append(f"gpus: {health.healthy_count} of {len(health.gpus)} healthy{kept}; "
                     f"unhealthy: {bad}")
    gate = report.gate
    verdict = "OPEN" if gate.open else "CLOSED"
    if colour:
        verdict = f"{_COLOURS[Status.PASS if gate.open else Status.FAIL]}{verdict}{_RESET}"
    tail = "" if gate.open else " (blocking: " + ", ".join(gate.blocking) + ")"
    strict = " [strict]" if report.strict else ""
    lines.append(f"gate {report.path}: {verdict}{tail}{strict}")
    return "\n".join(lines) + "\n"


class TextOutput:
    """`check`'s text for people, written to ``stream`` (stdout)."""

    def __init__(self, stream: TextIO, colour: bool = False) -> None:
        self.stream = stream
        self.colour = colour

    def publish(self, report: Report) -> str:
        text = render_text(report, colour=self.colour)
        self.stream.write(text)
        return text

    def close(self) -> None:
        self.stream.flush()


class JsonOutput:
    """`check --json`: schema 1 (docs/json-schema.md), written to ``stream``."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def publish(self, report: Report) -> str:
        text = render_json(report)
        self.stream.write(text)
        return text

    def close(self) -> None:
        self.stream.flush()
