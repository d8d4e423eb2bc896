"""collect runs each declared command with the declaring check's own timeout_s (at least the
default), so a site check whose sidecar `timeout` is longer than the default is recorded with
its real output rather than as timed out."""
import sys

import yaml

from agent.host import collect as collect_mod
from agent.host.collect import collect
from agent.host.seam import Host
from agent.hostview import CommandResult
from agent.model import ALL_PATHS, Check, Interval, Severity, passed
from agent.safeio.commands import SubprocessCommands


def make(cid, runs, timeout):
    return Check(cid, cid, Severity.CRITICAL, ALL_PATHS, Interval.FAST, "fix it",
                 lambda h, p: passed("ok"), runs=runs, timeout_s=timeout)


class Recording:
    """A command source that answers at once and remembers the timeout each argv was given."""

    def __init__(self):
        self.given = {}

    def run(self, argv, timeout):
        self.given[tuple(argv)] = timeout
        return CommandResult(tuple(argv), 0, "", "")


def test_a_command_slower_than_the_default_but_within_its_checks_timeout_is_recorded(tmp_path):
    # Scaled down by --timeout-scale 0.1: the default becomes 1 s, the site check's 30 s
    # becomes 3 s, and both commands take 1.5 s. The one only the default covers is killed
    # and recorded as timed out (the bound); the site check's finishes with its output.
    slow = "import time; time.sleep(1.5); print('finished')"
    site = (sys.executable, "-c", slow)
    plain = (sys.executable, "-c", slow, "plain")
    root = tmp_path / "host"
    root.mkdir()
    host = Host(root, commands=SubprocessCommands())
    checks = [make("site-slow", (site,), 30.0), make("plain", (plain,), 10.0)]
    out = collect(host, checks, str(tmp_path / "b"), timeout_scale=0.1)
    recs = {tuple(r["argv"]): r for r in yaml.safe_load((out / "commands.yaml").read_text())}
    assert recs[site]["rc"] == 0 and recs[site]["stdout"] == "finished\n"
    assert "timed_out" not in recs[site]
    assert recs[plain]["timed_out"] is True and recs[plain]["stdout"] == ""


def test_the_default_is_the_floor_and_can_be_lowered(tmp_path, monkeypatch):
    monkeypatch.setattr(collect_mod, "DEFAULT_RUN_TIMEOUT_S", 1.0)
    root = tmp_path / "host"
    root.mkdir()
    rec = Recording()
    collect(Host(root, commands=rec), [make("x", (("a",),), 0.5), make("y", (("b",),), 3.0)],
            str(tmp_path / "b"))
    assert rec.given == {("a",): 1.0, ("b",): 3.0}


def test_each_command_gets_the_longest_timeout_of_the_checks_declaring_it(tmp_path):
    shared, short, slow = ("a", "x"), ("b",), ("c",)
    checks = [make("one", (shared, short), 5.0),  # below the default: the default (10 s)
              make("two", (shared,), 40.0),
              make("three", (slow,), 25.0)]
    root = tmp_path / "host"
    root.mkdir()
    rec = Recording()
    collect(Host(root, commands=rec), checks, str(tmp_path / "b"), timeout_scale=2.0)
    assert rec.given == {shared: 80.0, short: 20.0, slow: 50.0}
