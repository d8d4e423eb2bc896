"""Failure codes through the engine: the code reaches the result, the fix comes from the
outcome, else the declared failure, else the check; pass and skip carry no code."""
from agent.engine import Engine
from agent.model import (
    ALL_PATHS,
    Check,
    Failure,
    Interval,
    Severity,
    Status,
    failed,
    not_applicable,
    passed,
    unknown,
    warned,
)

DECLARED = (
    Failure("too-old", Status.FAIL, "the thing is too old", "upgrade the thing", "its manual"),
    Failure("drifting", Status.WARN, "the thing drifts", "pin the thing", "its manual"),
)


def make(cid, fn):
    return Check(cid, cid, Severity.CRITICAL, ALL_PATHS, Interval.FAST, "general fix", fn,
                 failures=DECLARED)


def run_one(fn):
    (res,) = Engine([make("x", fn)]).run(None, None)
    return res


def test_a_declared_code_brings_its_fix():
    res = run_one(lambda h, p: failed("old", code="too-old"))
    assert (res.status, res.code, res.remediation) == (Status.FAIL, "too-old", "upgrade the thing")


def test_the_outcome_own_remediation_wins_over_the_declared_fix():
    res = run_one(lambda h, p: warned("drift", "pin it to 1.2", code="drifting"))
    assert (res.code, res.remediation) == ("drifting", "pin it to 1.2")


def test_no_code_falls_back_to_the_check_fix():
    res = run_one(lambda h, p: unknown("cannot tell"))
    assert (res.code, res.remediation) == (None, "general fix")


def test_pass_and_skip_carry_no_code_even_if_one_was_set():
    from agent.model import Outcome

    assert run_one(lambda h, p: Outcome(Status.PASS, "fine", code="too-old")).code is None
    assert run_one(lambda h, p: not_applicable("n/a")).code is None
    assert run_one(lambda h, p: passed("fine")).code is None


def test_check_failure_lookup_names_the_check_and_code_when_absent():
    check = make("x", lambda h, p: passed("fine"))
    assert check.failure("drifting").fix == "pin the thing"
    try:
        check.failure("nope")
    except KeyError as exc:
        assert "x declares no failure 'nope'" in str(exc)
    else:
        raise AssertionError("an undeclared code must raise")
