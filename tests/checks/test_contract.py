"""The contract every registered check keeps with the fixture bundles (tests/fixtures/bundles):
run as `check --bundle B` runs them (scripts/gen-check-docs run_bundles: the engine over each
bundle's Host, built once; a check is re-evaluated on another path only when its verdict read
the path; a bundle with a test-config.yaml is run with that config), every check

(a) passes on at least one bundle,
(b) has, for each failure code it declares, a bundle that produces it (or an entry in GAPS),
(c) names a declared code, with the declared status, on every warn, fail and unknown it returns
    (an unknown the engine makes, a deadline or an exception, has no code),
(d) declares its codes unique, kebab-case, each with a status it can return, a fix and a source.

docs/checks.md lists, per code, the bundles that produce it (the same run).
"""
import importlib.machinery
import importlib.util
import re
from collections import defaultdict

import pytest

from agent.model import Status
from checks.registry import ALL_CHECKS
from tests.conftest import REPO

# Declared failure codes that no fixture bundle produces yet, with why. This list must only
# shrink: test_gaps_are_real fails when an entry is in fact produced (delete it then), and a
# new check gets no entry here (docs/adding-a-check.md: one bundle per code). A code that only
# a setting produces needs no entry either: its bundle carries a test-config.yaml (below).
# (check id, code) -> why no bundle produces it yet. Empty: every declared code has a bundle.
# (The GPU checks' guard for a missing or malformed snapshot skips naming nvml-responsive,
# which owns those codes, so no GPU check declares a code only a direct call could reach.)
GAPS: dict = {}

KEBAB = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
ISSUE_STATUSES = (Status.WARN, Status.FAIL, Status.UNKNOWN)
IDS = [c.id for c in ALL_CHECKS]


def _generator():
    loader = importlib.machinery.SourceFileLoader("gen_check_docs",
                                                  str(REPO / "scripts" / "gen-check-docs"))
    spec = importlib.util.spec_from_loader("gen_check_docs", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def verdicts():
    """check id -> its Verdicts over every bundle and path (one run for the whole module)."""
    by_check = defaultdict(list)
    for v in _generator().run_bundles(ALL_CHECKS):
        by_check[v.check].append(v)
    return by_check


def _check(cid):
    return next(c for c in ALL_CHECKS if c.id == cid)


def test_every_bundle_ran_every_check(verdicts):
    bundles = sorted(p.name for p in (REPO / "tests/fixtures/bundles").iterdir()
                     if (p / "bundle.yaml").is_file())
    assert len(bundles) > 50  # the bundles exist: a contract over nothing would pass
    for cid in IDS:
        assert sorted({v.bundle for v in verdicts[cid]}) == bundles, cid


@pytest.mark.parametrize("cid", IDS)
def test_some_bundle_passes(cid, verdicts):
    assert any(v.status == "pass" for v in verdicts[cid]), f"{cid}: no bundle where it passes"


@pytest.mark.parametrize("cid", IDS)
def test_every_declared_code_has_a_bundle(cid, verdicts):
    produced = {v.code for v in verdicts[cid] if not v.engine}
    missing = [f.code for f in _check(cid).failures
               if f.code not in produced and (cid, f.code) not in GAPS]
    assert missing == [], (f"{cid}: no fixture bundle produces {missing}; add a bundle "
                           f"{cid}-<case> (docs/adding-a-check.md)")


def test_gaps_are_real(verdicts):
    declared = {(c.id, f.code) for c in ALL_CHECKS for f in c.failures}
    stale = [key for key in GAPS if key not in declared]
    assert stale == [], f"GAPS names codes no check declares: {stale}"
    produced = [key for key in GAPS
                if any(v.code == key[1] and not v.engine for v in verdicts[key[0]])]
    assert produced == [], f"GAPS entries a bundle now produces (delete them): {produced}"
    assert all(reason.strip() for reason in GAPS.values())


@pytest.mark.parametrize("cid", IDS)
def test_every_issue_carries_a_declared_code_with_its_status(cid, verdicts):
    declared = {f.code: str(f.status) for f in _check(cid).failures}
    wrong = defaultdict(list)  # (bundle, problem) -> paths
    for v in verdicts[cid]:
        if v.status not in [str(s) for s in ISSUE_STATUSES] or v.engine:
            continue
        if v.code is None:
            problem = f"{v.status} without a code: {v.summary[:100]}"
        elif v.code not in declared:
            problem = f"{v.status} with undeclared code {v.code!r}"
        elif declared[v.code] != v.status:
            problem = f"{v.code} is declared {declared[v.code]}, returned {v.status}"
        else:
            continue
        wrong[(v.bundle, problem)].append(v.path)
    lines = [f"{bundle} ({', '.join(paths)}): {problem}"
             for (bundle, problem), paths in sorted(wrong.items())]
    assert lines == [], f"{cid}, {len(lines)} verdicts:\n" + "\n".join(lines[:12])


def test_no_check_raises_on_a_bundle(verdicts):
    # An exception becomes an engine-made unknown without a code: (c) cannot see it, so it is
    # held here. A bundle is valid input; a check raising on it is a bug in the check.
    raised = sorted({f"{v.check} on {v.bundle}: {v.summary}" for vs in verdicts.values()
                     for v in vs if v.raised})
    assert raised == []


@pytest.mark.parametrize("cid", IDS)
def test_declared_failures_are_well_formed(cid):
    failures = _check(cid).failures
    codes = [f.code for f in failures]
    assert len(codes) == len(set(codes)), f"{cid}: duplicate codes {codes}"
    for f in failures:
        assert KEBAB.match(f.code), (cid, f.code)
        assert f.status in ISSUE_STATUSES, (cid, f.code, f.status)
        assert f.means.strip() and "\n" not in f.means.strip(), (cid, f.code, "means: one line")
        assert f.fix.strip(), (cid, f.code, "fix")
        assert f.source.strip(), (cid, f.code, "source")
        assert "DESIGN" not in f.source, (cid, f.code, "cite a public source")


def test_the_contract_sees_a_violation():
    # The checker itself: a verdict with an undeclared code, one without a code, and one with
    # the wrong status are each reported; an engine-made unknown is not.
    from agent.model import Check, Failure, Interval, Severity, failed, unknown

    check = Check(id="x", title="x", severity=Severity.CRITICAL, gates=(),
                  interval=Interval.FAST, remediation="r", run=lambda h, p: unknown("u"),
                  failures=(Failure("x-bad", Status.FAIL, "m", "f", "s"),))
    gen = _generator()
    v = gen.Verdict
    cases = {
        "x": [v("b1", "x", "dra", "fail", "x-other", False, False, "s"),
              v("b2", "x", "dra", "unknown", None, False, False, "s"),
              v("b3", "x", "dra", "warn", "x-bad", False, False, "s"),
              v("b4", "x", "dra", "unknown", None, True, False, "did not finish within 1s"),
              v("b5", "x", "dra", "fail", "x-bad", False, False, "s")],
    }
    import tests.checks.test_contract as me

    saved = me.ALL_CHECKS
    me.ALL_CHECKS = (check,)
    try:
        with pytest.raises(AssertionError) as err:
            test_every_issue_carries_a_declared_code_with_its_status("x", cases)
    finally:
        me.ALL_CHECKS = saved
    text = str(err.value)
    assert "b1" in text and "b2" in text and "b3" in text
    assert "b4" not in text and "b5" not in text
    assert failed("s", code="x-bad").code == "x-bad"


def test_a_bundle_may_carry_the_config_its_code_needs(tmp_path):
    # A code only a setting produces gets its bundle a test-config.yaml: the contract runs that
    # bundle as `check --bundle B --config B/test-config.yaml`, every other bundle without.
    import shutil

    gen = _generator()
    for name in ("plain", "configured"):
        shutil.copytree(REPO / "tests/fixtures/bundles/host-os-debian12", tmp_path / name,
                        symlinks=True)
    # Debian 12 is outside the built-in support matrix (policy_v1.yaml os.supported): warn;
    # a config that lists it makes the same host pass.
    (tmp_path / "configured" / gen.TEST_CONFIG).write_text(
        "policy:\n  os:\n    supported:\n      - {id: debian, versions: ['12']}\n")
    os_check = [c for c in ALL_CHECKS if c.id == "os-supported"]
    got = {(v.bundle, v.path): (v.status, v.configured) for v in gen.run_bundles(os_check, tmp_path)}
    assert got[("plain", "dra")] == ("warn", False)
    assert got[("configured", "dra")] == ("pass", True)
