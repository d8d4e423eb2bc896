"""The engine: per-check deadlines, exceptions contained, requirements, bounded threads."""
import threading
import time

from agent.engine import Engine
from agent.model import ALL_PATHS, Check, Interval, Severity, Status, failed, passed, unknown
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


# -- per-path evaluation ------------------------------------------------------------------
class _Policy:
    """The shape the engine needs: a `path` (as checks.policy.ResolvedPolicy has)."""

    def __init__(self, path):
        self.path = path


class _Host:
    def __init__(self):
        self.runs = []
        self.facts = []

    def run(self, argv, timeout=10.0):
        from agent.hostview import CommandResult

        self.runs.append(tuple(argv))
        return CommandResult(tuple(argv), 0, f"answer {len(self.runs)}")

    def fact(self, name):
        self.facts.append(name)
        return {"n": len(self.facts)}

    def kmsg(self):
        return []

    def gpus(self):
        return {}


def test_a_check_that_reads_the_path_is_judged_on_every_path_with_the_same_host_answers():
    seen = []

    def minimum(host, policy):
        out = host.run(["tool", "--version"]).stdout
        fact = host.fact("node")["n"]
        seen.append((policy.path, out, fact))
        return failed("too old") if policy.path == "operator-gpucluster" else passed("ok")

    host = _Host()
    (res,) = Engine([make("m", minimum)]).run(host, _Policy("dra"))
    assert res.status == Status.PASS
    assert set(res.by_path) == {"operator-gpucluster"}
    assert res.by_path["operator-gpucluster"].status == Status.FAIL
    assert res.status_on("operator-gpucluster") == Status.FAIL and res.status_on("dra") == Status.PASS
    # Four evaluations, one per path, but the command ran and the fact was read once.
    assert sorted(p for p, _, _ in seen) == sorted(ALL_PATHS)
    assert {(o, f) for _, o, f in seen} == {("answer 1", 1)}
    assert host.runs == [("tool", "--version")] and host.facts == ["node"]
    report = build_report([res], "dra", False, "h", 0.0, "v")
    assert report.gate.open and report.gates["operator-gpucluster"].blocking == ("m",)


def test_a_check_that_never_reads_the_path_runs_once():
    calls = []
    Engine([make("x", lambda h, p: calls.append(1) or passed("same"))]).run(_Host(), _Policy("dra"))
    assert calls == [1]


def test_requirements_are_resolved_per_path():
    def base(host, policy):
        return failed("no") if policy.path == "device-plugin" else passed("yes")

    engine = Engine([make("base", base), make("dep", lambda h, p: passed("ran"), requires=("base",))])
    res = {r.id: r for r in engine.run(_Host(), _Policy("dra"))}
    assert res["dep"].status == Status.PASS
    other = res["dep"].by_path["device-plugin"]
    assert (other.status, other.skip) == (Status.SKIP, "needs:base")
    report = build_report(list(res.values()), "dra", False, "h", 0.0, "v")
    assert report.gates["device-plugin"].blocking == ("base",)


def test_skip_kinds_from_the_engine():
    engine = Engine([make("base", lambda h, p: failed("no")),
                     make("dep", lambda h, p: passed("never"), requires=("base",)),
                     make("cfg", lambda h, p: passed("never"))])
    res = {r.id: r for r in engine.run(_Host(), _Policy("dra"), skip=["cfg"])}
    assert res["dep"].skip == "needs:base" and res["cfg"].skip == "configured"
    assert res["base"].skip is None


def test_a_source_never_captured_gets_the_capture_fix_only_when_it_could_not_judge():
    from agent.hostview import CommandResult

    class Bundle(_Host):
        capture_hint = "Not captured in this bundle: {missing}. Capture it."

        def run(self, argv, timeout=10.0):
            return CommandResult(tuple(argv), -1, "", "", not_recorded=True)

    def blind(host, policy):
        host.run(["chronyc", "tracking"])
        return unknown("could not tell")

    def found(host, policy):
        host.run(["chronyc", "tracking"])
        return failed("saw a real problem", "repair it")

    res = {r.id: r for r in Engine([make("blind", blind), make("found", found)]).run(
        Bundle(), _Policy("dra"))}
    assert res["blind"].remediation == "Not captured in this bundle: `chronyc tracking`. Capture it."
    assert res["found"].remediation == "repair it"


def test_a_gate_newer_than_the_pinned_policy_is_skipped_and_runs_from_its_version():
    from agent import records
    from checks.policy import ResolvedPolicy, load_policy

    ran = []
    check = records.replace(
        make("new-gate", lambda h, p: ran.append(p.path) or failed("no")), since_policy=2)
    (pinned,) = Engine([check]).run(None, ResolvedPolicy(load_policy(1), "dra"))
    assert (pinned.status, pinned.skip) == (Status.SKIP, "not-applicable")
    assert "policy version 2" in pinned.summary and "pins policy_version 1" in pinned.summary
    assert ran == []
    (newest,) = Engine([check]).run(None, ResolvedPolicy(load_policy(2), "dra"))
    assert newest.status == Status.FAIL and "dra" in ran
