"""A site check's answer (checks/site/outcome.py) held to docs/site-checks.md, "The answer":
the JSON line's limits at their edges, the words of each refusal, and the runner's vetting and
deadline. Written for the mutants the mutation tier left alive (tests/mutation/tier.py); every
expected value is the documented one, typed here by hand."""
import json
from typing import Any, List, Optional, Tuple

import pytest

from agent.hostview import CommandResult
from agent.model import Status
from checks.site import outcome
from checks.site.outcome import _json_line, interpret, refusal, runner

P = "/etc/gpu-node-agent/site-checks.d/ib-ports.sh"


def _said(line: str, rc: int = 0):
    return interpret(CommandResult(("x",), rc, line + "\nmore\n", ""), P, 30)


def _bad(line: str) -> str:
    got = _said(line)
    assert (got.status, got.code) == (Status.UNKNOWN, "site-check-bad-output"), got
    prefix = f"{P}: "
    assert got.summary.startswith(prefix)
    return got.summary[len(prefix):]


# --- the JSON line's limits, at their edges ------------------------------------------------

def test_a_line_of_exactly_4096_characters_is_read() -> None:
    line = '{"summary": "' + "x" * 4081 + '"}'
    assert len(line) == 4096
    got = _said(line)
    assert (got.status, got.code) == (Status.PASS, None)
    assert got.summary == "x" * 200  # the summary's own cap


def test_a_line_of_4097_characters_is_refused() -> None:
    assert _bad('{"summary": "' + "x" * 4082 + '"}') == (
        "the JSON line is longer than 4096 characters")


def test_thirty_two_detail_keys_are_read_and_thirty_three_refused() -> None:
    keys = {f"k{i}": i for i in range(32)}
    got = _said(json.dumps({"status": "warn", "details": keys}))
    assert (got.status, got.code) == (Status.WARN, "site-check-warn")
    assert got.details["reported"] == keys
    keys["k32"] = 32
    assert _bad(json.dumps({"details": keys})) == "details is not an object of at most 32 keys"


def test_details_that_are_not_an_object() -> None:
    assert _bad('{"details": [1]}') == "details is not an object of at most 32 keys"
    assert _bad('{"details": "x"}') == "details is not an object of at most 32 keys"


def test_null_or_absent_details_are_empty() -> None:
    assert _said('{"status": "pass", "details": null}').details["reported"] == {}
    assert _said('{"status": "pass"}').details["reported"] == {}


def test_a_detail_value_of_512_characters_is_read_and_513_refused() -> None:
    got = _said(json.dumps({"details": {"port": "v" * 512}}))
    assert got.status == Status.PASS and got.details["reported"] == {"port": "v" * 512}
    assert _bad(json.dumps({"details": {"port": "v" * 513}})) == (
        "details.port is longer than 512 characters")


def test_a_long_detail_key_is_named_by_its_first_forty_characters() -> None:
    key = "k" * 40 + "TAIL"
    assert _bad(json.dumps({"details": {key: "v" * 513}})) == (
        f"details.{'k' * 40} is longer than 512 characters")
    assert _bad(json.dumps({"details": {key: [1]}})) == (
        f"details.{'k' * 40} is not a string, number, boolean or null")


def test_refusal_words() -> None:
    assert _bad('{"status": "ok", "bogus": 1, "also": 2}') == (
        "unknown key(s) also, bogus (known: details, status, summary)")
    assert _bad('{"summary": 5}') == "summary is not a string"
    # The status is shown by its first 40 characters, as a Python repr.
    assert _bad('{"status": "' + "s" * 40 + 'TAIL"}') == (
        f"status '{'s' * 40}' is not pass, warn or fail")


def test_invalid_json_names_the_decoder_message_cut_at_80_characters() -> None:
    # CPython json.decoder.JSONDecodeError: "%s: line %d column %d (char %d)"; this one is 81
    # characters, so the last is cut.
    assert _bad("{" + " " * 1000 + "x") == (
        "the first line is not valid JSON (Expecting property name enclosed in double quotes: "
        "line 1 column 1002 (char 1001)")


def test_a_json_line_that_nests_too_deeply(monkeypatch) -> None:
    # Python 3.9's json.loads raises RecursionError past ~1,000 levels, which 4,096
    # characters reach; newer versions go deeper, so the error is forced here.
    def deep(_: str) -> Any:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(outcome.json, "loads", deep)
    assert _bad('{"a": 1}') == "the JSON line nests too deeply"


def test_only_an_object_is_a_status_line() -> None:
    assert _json_line("[1]") == (None, "the JSON line is not an object")
    assert _json_line('"text"') == (None, "the JSON line is not an object")


# --- the runner -------------------------------------------------------------------------------

class _Host:
    def __init__(self, live: Optional[bool]) -> None:
        if live is not None:
            self.is_live = live
        self.calls: List[Tuple[Any, Any]] = []

    def run(self, argv, timeout: Optional[float] = None) -> CommandResult:
        self.calls.append((argv, timeout))
        return CommandResult(tuple(argv), 0, "", "")


def test_a_live_host_vets_before_each_run() -> None:
    asked: List[int] = []

    def vet() -> Optional[str]:
        asked.append(1)
        return "owned by uid 1000, not root (uid 0)"

    host = _Host(live=True)
    got = runner(P, 30, vet)(host, None)
    assert (got.status, got.code) == (Status.UNKNOWN, "site-check-refused")
    assert got.summary == f"{P}: refused, never run: owned by uid 1000, not root (uid 0)"
    assert got.details == {"path": P, "problem": "owned by uid 1000, not root (uid 0)"}
    assert host.calls == [] and asked == [1]


@pytest.mark.parametrize("live", [False, None])  # a bundle or tree; a host without the flag
def test_a_recorded_answer_is_not_vetted(live) -> None:
    def vet() -> Optional[str]:
        raise AssertionError("vetted a host that is not live")

    host = _Host(live=live)
    got = runner(P, 30, vet)(host, None)
    assert got.status == Status.PASS and got.summary == f"{P} exited 0"
    assert len(host.calls) == 1


def test_a_live_host_whose_file_is_fine_runs_it_with_the_runner_deadline() -> None:
    host = _Host(live=True)
    got = runner(P, 7, lambda: None)(host, None)
    assert got.summary == f"{P} exited 0" and got.details["path"] == P
    ((argv, timeout),) = host.calls
    assert timeout == 7 + 5.0  # the deadline plus the runner's grace (RUNNER_GRACE_S)
    assert argv[-3:] == ("2", "7", P)


def test_a_refusal_carries_its_details() -> None:
    got = refusal("s", "site-check-name", path="/d", files=["x"])(None, None)
    assert (got.status, got.summary, got.code) == (Status.UNKNOWN, "s", "site-check-name")
    assert got.details == {"path": "/d", "files": ["x"]}


# --- what interpret keeps of a run (docs/site-checks.md, "How it runs" and "The answer") ------

def test_the_first_two_kib_of_each_stream_are_kept_with_path_and_exit_code() -> None:
    out, err = "o" * 3000 + "\n", "e" * 3000
    got = interpret(CommandResult(("x",), 1, out, err), P, 30)
    assert (got.status, got.code) == (Status.FAIL, "site-check-failed")
    assert got.details == {"path": P, "exit_code": 1, "output": "o" * 2048, "stderr": "e" * 2048}


def test_a_timeout_names_its_deadline() -> None:
    got = interpret(CommandResult(("x",), 124, "started\n", ""), P, 7)
    assert got.summary == f"{P} did not finish within its 7s deadline; killed"
    assert got.details == {"path": P, "exit_code": 124, "output": "started\n", "stderr": "",
                           "deadline_s": 7}


def test_not_recorded_names_the_command() -> None:
    got = interpret(CommandResult(("/usr/bin/env", "-i"), -1, "", "", not_recorded=True), P, 30)
    assert got.status == Status.SKIP
    assert got.summary == f"{P}: not run here (`/usr/bin/env -i` not recorded for this host)"
    assert got.details == {"path": P}


@pytest.mark.parametrize("rc, why", [
    # 126: found but not executable (POSIX "Command Search and Execution"): the command's
    # own words, from its stderr.
    (126, "`x` exited 126: permission denied"),
    (-9, "`x` exited -9: permission denied"),  # a signal
    (3, f"{P} exited 3"),
])
def test_unknown_exit_codes_are_worded(rc: int, why: str) -> None:
    got = interpret(CommandResult(("x",), rc, "", "permission denied\n"), P, 30)
    assert (got.status, got.code) == (Status.UNKNOWN, "site-check-unknown")
    assert got.summary == f"{why} (0 is pass, 1 is fail, anything else unknown)"


def test_a_status_line_without_a_summary_falls_back_to_the_exit() -> None:
    got = _said('{"status": "warn"}')
    assert (got.status, got.code, got.summary) == (Status.WARN, "site-check-warn",
                                                    f"{P} exited 0")
    got = _said('{"status": "fail", "summary": ""}')
    assert (got.status, got.summary) == (Status.FAIL, f"{P} exited 0")


def test_bad_output_keeps_the_output() -> None:
    got = interpret(CommandResult(("x",), 0, '{"status": "maybe"}\n', "warned\n"), P, 30)
    assert got.code == "site-check-bad-output"
    assert got.details == {"path": P, "exit_code": 0, "output": '{"status": "maybe"}\n',
                           "stderr": "warned\n"}
