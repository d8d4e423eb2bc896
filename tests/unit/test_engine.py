"""The engine: per-check deadlines, exceptions contained, requirements, bounded threads."""
import threading
import time

from agent.engine import Engine
from agent.model import ALL_PATHS, Check, Interval, Severity, Status, failed, passed
from agent.report import build_report


def make(cid, fn, requires=(), timeout=1.0, severity=Severity.CRITICAL):
    return Check(cid, cid, severity, ALL_PATHS, Interval.FAST, "fix it", fn,
                 requires=requires, timeout_s=timeout)


def test_exception_becomes_unknown_with_its_type():
    def boom(host, policy):
        raise ValueError("bad input")

    (res,) = Engine([make("x", boom)]).run(None, None)
    assert res.status == Status.UNKNOWN
    assert "ValueError" in res.summary and "bad input" in res.summary


def test_non_outcome_return_is_unknown():
    (res,) = Engine([make("x", lambda h, p: "pass")]).run(None, None)
    assert res.status == Status.UNKNOWN and "TypeError" in res.summary


def test_hanging_check_times_out_and_is_not_started_again_while_alive():
    release = threading.Event()
    starts = []

    def hang(host, policy):
        starts.append(1)
        release.wait(10)
        return passed("late")

    engine = Engine([make("hang", hang, timeout=0.2), make("ok", lambda h, p: passed("fine"))])
    t0 = time.monotonic()
    first = {r.id: r for r in engine.run(None, None)}
    assert time.monotonic() - t0 < 2
    assert first["hang"].status == Status.UNKNOWN and "did not finish" in first["hang"].summary
    assert first["ok"].status == Status.PASS
    second = {r.id: r for r in engine.run(None, None)}
    assert second["hang"].status == Status.UNKNOWN and "still in progress" in second["hang"].summary
    assert len(starts) == 1 and engine.still_running() == ["hang"]
    release.set()
    time.sleep(0.1)
    third = {r.id: r for r in engine.run(None, None)}
    assert len(starts) == 2 and third["hang"].status == Status.PASS


def test_requirement_not_passing_skips_dependants_naming_it():
    engine = Engine([make("base", lambda h, p: failed("no driver")),
                     make("dep", lambda h, p: passed("never"), requires=("base",))])
    res = {r.id: r for r in engine.run(None, None)}
    assert res["dep"].status == Status.SKIP and res["dep"].summary == "needs base (fail)"


def test_only_runs_the_closure_and_skip_is_reported():
    calls = []
    engine = Engine([make("a", lambda h, p: calls.append("a") or passed("a")),
                     make("b", lambda h, p: calls.append("b") or passed("b"), requires=("a",)),
                     make("c", lambda h, p: calls.append("c") or passed("c"))])
    res = engine.run(None, None, only=["b"], skip=["a"])
    assert [r.id for r in res] == ["a", "b"] and calls == []
    assert res[0].status == Status.SKIP and res[1].status == Status.SKIP


def test_gate_counts_critical_fail_and_unknown_and_strict_counts_warn():
    checks = [make("crit", lambda h, p: failed("x")),
              make("warnonly", lambda h, p: failed("y"), severity=Severity.WARNING)]
    results = Engine(checks).run(None, None)
    report = build_report(results, "dra", False, "h", 0.0, "v")
    assert report.gate.blocking == ("crit",)
    strict = build_report(results, "dra", True, "h", 0.0, "v")
    assert strict.gate.blocking == ("crit", "warnonly")
    assert set(report.gates) == set(ALL_PATHS)
