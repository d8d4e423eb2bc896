"""The GPUReady condition's reason and message for a closed gate (agent/kube/reconcile.py
closed_reason/closed_message), with exact expected strings: written against the mutants the
mutation tier found surviving there (docs/testing.md)."""
from agent.kube.reconcile import REASON_FAILED, REASON_UNKNOWN, closed_message, closed_reason
from agent.model import Status
from tests.kube_reports import report


class _Gate:
    def __init__(self, blocking):
        self.blocking = tuple(blocking)
        self.open = not blocking


class _Report:
    """A report whose gate names a check it has no result for (a hand-edited bundle)."""

    path = "dra"

    def __init__(self, blocking):
        self.gate = _Gate(blocking)

    def result(self, check_id):
        return None


def test_reason_is_unknown_only_when_every_blocking_check_is_unknown():
    assert closed_reason(report({"gpu-xid": "no kernel log"}, status=Status.UNKNOWN)) == REASON_UNKNOWN
    assert closed_reason(report({"gpu-xid": "XID 79", "gpu-ecc": "DBE"})) == REASON_FAILED
    assert closed_reason(_Report([])) == REASON_FAILED
    assert (REASON_FAILED, REASON_UNKNOWN) == ("CheckFailed", "CheckUnknown")


def test_message_names_the_first_blocking_check_and_counts_the_rest():
    rep = report({"driver-loaded": "module\nnot loaded", "gpu-ecc": "DBE"})
    assert closed_message(rep) == "driver-loaded fail: module not loaded; +1 more blocking"
    # head "gpu-ecc fail: " is 14 characters; 16 left: 13 of the summary and "..."
    cut = closed_message(report({"gpu-ecc": "x" * 50}), limit=30)
    assert cut == "gpu-ecc fail: " + "x" * 13 + "..." and len(cut) == 30


def test_message_without_a_result_or_without_blocking_checks():
    assert closed_message(_Report(["ghost"])) == "ghost: blocking"
    assert closed_message(_Report(["ghost", "other"])) == "ghost: blocking; +1 more blocking"
    assert closed_message(_Report([])) == "gate dra closed"
