"""From a check's Outcomes (one per allocation path it was evaluated on) to its CheckResult:
the summary, the fix (the outcome's own, else its declared failure's, else the check's), the
failure code, the skip kind, and the paths on which it decides differently."""
from typing import Any, Dict, Optional, Sequence

from agent.model import (
    SKIP_INPUT_MISSING,
    SKIP_NOT_APPLICABLE,
    Check,
    CheckResult,
    Outcome,
    PathOutcome,
    Status,
)


def skip_kind(outcome: Outcome) -> Optional[str]:
    if outcome.status != Status.SKIP:
        return None
    return outcome.skip or SKIP_NOT_APPLICABLE


def _capture_fix(
    outcome: Outcome, fix: str, missing: Sequence[str], hint: Optional[str]
) -> str:
    """On a bundle or a tree, a result that could not judge because a source was never
    captured gets a fix that says so and how to capture it, not how to repair a live host."""
    if not hint or not missing:
        return fix
    if outcome.status != Status.UNKNOWN and skip_kind(outcome) != SKIP_INPUT_MISSING:
        return fix
    shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
    return hint.format(missing=shown)


def result_of(
    check: Check,
    outcomes: Dict[Any, Outcome],
    paths: Sequence[Any],
    duration: float,
    missing: Sequence[str] = (),
    hint: Optional[str] = None,
) -> CheckResult:
    main = outcomes[paths[0]]
    summary = " ".join(main.summary.split()) or "(no summary)"
    remediation = _capture_fix(main, _fix(check, main), missing, hint)
    by_path: Dict[str, PathOutcome] = {}
    for path in paths[1:]:
        other = outcomes[path]
        other_summary = " ".join(other.summary.split()) or "(no summary)"
        if other.status != main.status or other_summary != summary:
            by_path[path] = PathOutcome(
                status=other.status,
                summary=other_summary,
                remediation=_capture_fix(other, _fix(check, other), missing, hint),
                skip=skip_kind(other),
                code=_code(other),
            )
    return CheckResult(
        id=check.id,
        title=check.title,
        severity=check.severity,
        status=main.status,
        summary=summary,
        remediation=remediation,
        gates=check.gates,
        details=dict(main.details),
        duration_s=round(duration, 6),
        skip=skip_kind(main),
        code=_code(main),
        by_path=by_path,
    )


def _code(outcome: Outcome) -> Optional[str]:
    return outcome.code if outcome.status in (Status.WARN, Status.FAIL, Status.UNKNOWN) else None


def _fix(check: Check, outcome: Outcome) -> str:
    """The outcome's own remediation, else its declared failure's fix, else the check's."""
    if outcome.remediation:
        return outcome.remediation
    code = _code(outcome)
    for failure in check.failures:
        if failure.code == code:
            return failure.fix
    return check.remediation
