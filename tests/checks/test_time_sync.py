"""time-sync on fixture hosts (tests/fixtures/bundles/time-*): pass, warn, each way it fails,
and unknown on output it cannot read. The expectations are facts of the captured daemon
state (a `*` source with reach 300 has missed its last 6 polls), not copied summaries."""
from pathlib import Path

import pytest
import yaml

from agent.config import Config
from checks.policy import ResolvedPolicy, load_policy
from checks.time.time_sync import RUNS, TIME_SYNC
from tests.checks.bundle_support import run_on_bundle
from tests.conftest import BUNDLES, bundle, run_cli

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "time-sync"


def evaluate(name, **time_sync):
    settings = Config.model_validate({"time_sync": time_sync}).model_dump()
    policy = ResolvedPolicy(load_policy(), "dra", settings=settings)
    return run_on_bundle(TIME_SYNC, name, policy)


@pytest.mark.parametrize("name, status, needles", [
    ("time-chrony-synced", "pass", ["chrony", "127.0.0.1", "stratum 4"]),
    ("time-chrony-synced-no-rtcsync", "pass", ["chrony", "127.0.0.1"]),
    ("time-chrony-one-poll-lost-reach376", "pass", ["127.0.0.1"]),
    ("time-chrony-three-polls-lost-reach370", "pass", ["127.0.0.1"]),
    ("time-chrony-unsynchronised", "fail", ["not synchronised", "reach 000"]),
    ("time-chrony-server-stopped-unreachable", "fail", ["no selected source", "unreachable"]),
    ("time-chrony-server-stopped-reach300", "fail", ["not answered in its last 4 polls",
                                                     "reach 300"]),
    ("time-chrony-local-only", "warn", ["own clock", "local stratum 3"]),
    ("time-chrony-offset-fail", "fail", ["+2.500 s", "limit 1 s"]),
    ("time-chrony-offset-warn", "warn", ["-250.0 ms"]),
    ("time-chrony-truncated", "unknown", ["chronyc -c tracking", "expected 14 CSV fields"]),
    ("time-ntpd-synced", "pass", ["ntpd", "metadata.google", "+300.0 us"]),
    ("time-ntpd-no-system-peer", "fail", ["ntpd has no selected source"]),
    ("time-timesyncd-synced", "pass", ["systemd-timesyncd", "-412.0 us"]),
    ("time-timedatectl-not-synchronized", "fail", ["NTPSynchronized=no"]),
    ("time-ptp-synced", "pass", ["PTP (phc2sys)"]),
    ("time-ptp-unsynchronised", "fail", ["PTP (ptp4l)", "STA_UNSYNC"]),
    ("time-kernel-only-unsynchronised", "fail", ["no time daemon answered", "STA_UNSYNC"]),
    ("time-nothing-recorded", "unknown", ["not captured", "not recorded"]),
])
def test_fixture_hosts(name, status, needles):
    out = evaluate(name)
    assert str(out.status) == status, out.summary
    for needle in needles:
        assert needle in out.summary


# The failure code of each bundle's situation, by the declared failures of checks/time/time_sync.py:
# chrony "Not synchronised" and PTP with STA_UNSYNC are unsynchronised; reach 300 (silent for 6
# polls) and no `*` source are no reachable source; +2.5 s is over the 1 s limit, -250 ms over the
# 100 ms warning; `local stratum` and ntpd's missing system peer; no daemon with the kernel or
# timedatectl saying unsynchronised; a truncated CSV; no daemon and no adjtimex fact.
CODES = {
    "time-chrony-synced": None,
    "time-chrony-synced-no-rtcsync": None,
    "time-chrony-one-poll-lost-reach376": None,
    "time-chrony-three-polls-lost-reach370": None,
    "time-chrony-unsynchronised": "unsynchronised",
    "time-chrony-server-stopped-unreachable": "no-reachable-source",
    "time-chrony-server-stopped-reach300": "no-reachable-source",
    "time-chrony-local-only": "local-clock-only",
    "time-chrony-offset-fail": "offset-over-limit",
    "time-chrony-offset-warn": "offset-over-warning",
    "time-chrony-truncated": "daemon-unreadable",
    "time-ntpd-synced": None,
    "time-ntpd-no-system-peer": "no-reachable-source",
    "time-timesyncd-synced": None,
    "time-timedatectl-not-synchronized": "no-daemon",
    "time-ptp-synced": None,
    "time-ptp-unsynchronised": "unsynchronised",
    "time-kernel-only-unsynchronised": "no-daemon",
    "time-nothing-recorded": "nothing-recorded",
}


@pytest.mark.parametrize("name", sorted(CODES))
def test_fixture_hosts_name_their_failure_code(name):
    out = evaluate(name)
    assert out.code == CODES[name], out.summary
    if out.code is not None:
        assert out.status == TIME_SYNC.failure(out.code).status


def test_every_declared_failure_has_a_bundle_and_a_fix():
    declared = {f.code for f in TIME_SYNC.failures}
    assert declared == {c for c in CODES.values() if c is not None}
    assert len(TIME_SYNC.failures) == len(declared) == 8
    for f in TIME_SYNC.failures:
        assert f.fix and f.source and f.means, f.code


def test_every_time_bundle_has_an_expectation():
    tested = {p[0] for p in test_fixture_hosts.pytestmark[0].args[1]}
    assert {p.name for p in BUNDLES.glob("time-*")} == tested


def test_chrony_synced_without_rtcsync_is_no_false_alarm_and_says_why():
    out = evaluate("time-chrony-synced-no-rtcsync")
    kernel = out.details["kernel"]
    assert "STA_UNSYNC" in kernel["flags"] and kernel["state"] == "TIME_ERROR"
    assert kernel["synchronised"] is False and str(out.status) == "pass"
    assert out.details["daemon"] == "chrony" and out.details["stratum"] == 4


def test_details_carry_offset_stratum_source_daemon_and_kernel_flags():
    d = evaluate("time-chrony-synced").details
    assert d["daemon"] == "chrony" and d["source"] == "127.0.0.1" and d["stratum"] == 4
    assert d["offset_s"] == pytest.approx(-1.376e-6)
    assert d["sources"][0]["reach"] == "377" and d["kernel"]["flags"] == ["STA_NANO"]


def test_thresholds_come_from_the_config():
    assert str(evaluate("time-chrony-offset-warn", offset_warn_s=0.3).status) == "pass"
    assert str(evaluate("time-chrony-offset-warn", offset_fail_s=0.2).status) == "fail"
    assert str(evaluate("time-chrony-offset-fail", offset_fail_s=3.0).status) == "warn"


def test_reach_window_is_configurable():
    # reach 370: the last 3 polls lost. A 3-poll window fails it, the default 4 does not.
    assert str(evaluate("time-chrony-three-polls-lost-reach370").status) == "pass"
    out = evaluate("time-chrony-three-polls-lost-reach370", reach_polls=3)
    assert str(out.status) == "fail" and "last 3 polls" in out.summary


def test_configured_socket_falls_back_to_the_recorded_plain_argv_in_a_bundle():
    out = evaluate("time-chrony-synced", chrony_socket="/run/chrony-alt/chronyd.sock")
    assert str(out.status) == "pass"


def test_bundles_hold_the_real_captured_outputs():
    """Each bundle that names a fixture file as its source records it byte for byte."""
    checked = 0
    for meta_path in BUNDLES.glob("time-*/bundle.yaml"):
        meta = yaml.safe_load(meta_path.read_text())
        records = yaml.safe_load((meta_path.parent / "commands.yaml").read_text())
        outputs = {r["stdout"] for r in records} | {r["stderr"] for r in records}
        for prov in meta["provenance"]:
            source = prov["source"]
            if source.startswith("tests/fixtures/time-sync/") and " " not in source:
                assert (FIX / Path(source).name).read_text() in outputs, (meta_path, source)
                checked += 1
    assert checked >= 15


def _asked(answers):
    from agent.host.seam import Host, StaticFacts
    from agent.hostview import CommandResult

    asked = []

    class Recorder:
        def run(self, argv, timeout):
            asked.append(tuple(argv))
            out = answers.get(tuple(argv))
            return CommandResult(tuple(argv), 0, out) if out is not None else CommandResult(
                tuple(argv), 127, "", "not installed")

    host = Host("/nonexistent-root", commands=Recorder(), facts=StaticFacts({}))
    TIME_SYNC.run(host, ResolvedPolicy(load_policy(), "dra", settings=Config().model_dump()))
    return set(asked)


def test_runs_declares_every_command_the_check_runs():
    """The check asks only for declared argv lists: collect captures exactly `runs`."""
    nothing = _asked({})
    chrony = _asked({("chronyc", "-c", "tracking"):
                     (FIX / "chronyc-c-tracking.synced-ntp.csv").read_text(),
                     ("chronyc", "-c", "sources"):
                     (FIX / "chronyc-c-sources.synced-ntp.csv").read_text()})
    assert nothing <= set(RUNS) and chrony <= set(RUNS)
    assert nothing | chrony == set(RUNS)  # and every declared argv is used


def test_cli_reports_time_sync_from_a_bundle_and_gates_on_it():
    res = run_cli(["check", "--bundle", bundle("time-chrony-server-stopped-reach300"),
                   "--only", "time-sync", "--format", "json"])
    doc = res.json()
    (check,) = [c for c in doc["checks"] if c["id"] == "time-sync"]
    assert check["status"] == "fail" and check["severity"] == "critical"
    assert res.rc == 1 and "time-sync" in doc["gate"]["blocking"]
    ok = run_cli(["check", "--bundle", bundle("time-chrony-synced-no-rtcsync"),
                  "--only", "time-sync", "--format", "json"])
    assert ok.rc == 0, ok.out
