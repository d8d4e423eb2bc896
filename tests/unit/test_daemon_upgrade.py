"""`run` follows the GPU Operator's driver upgrade: NVML maintenance while the Node's
upgrade-state label says the driver is being replaced, and back when it clears.

The state names below are written by hand from NVIDIA/k8s-operator-libs pkg/upgrade/consts.go
(the UpgradeState* constants) and the label key from its UpgradeStateLabelKeyFmt
"nvidia.com/%s-driver-upgrade-state" with the driver name "gpu" that NVIDIA/gpu-operator
cmd/gpu-operator/main.go sets (``upgrade.SetDriverName("gpu")``)."""
import logging
from typing import Any, Dict, List, Optional

import pytest

from agent.daemon.upgrade import (
    ENTER_STATES,
    LABEL,
    LEAVE_STATES,
    Action,
    UpgradeFollower,
    decide,
)

KEY = "nvidia.com/gpu-driver-upgrade-state"

# Every UpgradeState* value of pkg/upgrade/consts.go, with what the agent does in it
# (docs/decisions.md, "run: NVML maintenance during a GPU Operator driver upgrade").
TABLE = [
    ("", Action.LEAVE),  # UpgradeStateUnknown
    ("upgrade-required", Action.LEAVE),
    ("cordon-required", Action.LEAVE),
    ("wait-for-jobs-required", Action.LEAVE),
    ("pod-deletion-required", Action.ENTER),
    ("drain-required", Action.ENTER),
    ("node-maintenance-required", Action.ENTER),
    ("post-maintenance-required", Action.ENTER),
    ("pod-restart-required", Action.ENTER),
    ("validation-required", Action.LEAVE),
    ("uncordon-required", Action.LEAVE),
    ("upgrade-done", Action.LEAVE),
    ("upgrade-failed", Action.LEAVE),
]


def node(state: Optional[str] = None, **more: str) -> Dict[str, Any]:
    labels = dict(more)
    if state is not None:
        labels[KEY] = state
    return {"kind": "Node", "metadata": {"name": "gpu-1", "labels": labels}}


def test_the_label_key_is_the_gpu_operators():
    assert LABEL == KEY


@pytest.mark.parametrize(("state", "action"), TABLE)
def test_every_upgrade_state(state, action):
    decision = decide(node(state, **{"kubernetes.io/hostname": "gpu-1"}))
    assert decision.action is action
    assert decision.state == state


def test_the_table_covers_exactly_the_librarys_states():
    assert {s for s, _ in TABLE} == ENTER_STATES | LEAVE_STATES
    assert not ENTER_STATES & LEAVE_STATES


def test_no_label_leaves():
    assert decide(node()).action is Action.LEAVE
    assert decide({"metadata": {"name": "gpu-1"}}).action is Action.LEAVE  # no labels at all
    assert decide({"metadata": {"name": "gpu-1", "labels": None}}).action is Action.LEAVE


@pytest.mark.parametrize("unreadable", [
    None,  # not captured
    {"error": "Get https://127.0.0.1:6443/api/v1/nodes/gpu-1: connection refused"},
    {"error": "the Kubernetes API is not used (kube.enabled is false)"},
    "not an object",
    {"kind": "Node"},  # no metadata
    {"metadata": {"labels": ["a", "b"]}},
    {"metadata": {"labels": {KEY: 3}}},
    node("a-state-of-a-newer-controller"),
])
def test_what_cannot_be_read_keeps_the_mode(unreadable):
    assert decide(unreadable).action is Action.KEEP


class FakeClient:
    """What the follower calls on the NVML client; the flag file is the client's business."""

    def __init__(self, flag: bool = False) -> None:
        self.calls: List[Any] = []
        self.flag = flag
        self.api = False

    def maintenance(self, on: bool, reason: str = "") -> None:
        self.calls.append((on, reason))
        self.api = on

    def check_maintenance_flag(self) -> bool:
        return self.api or self.flag


class FakeEvents:
    def __init__(self) -> None:
        self.paused: List[bool] = []

    def pause(self, on: bool) -> None:
        self.paused.append(on)


class Monitor:
    """An XID monitor with an old-style event stream: the follower must leave it alone, since
    the NVML client's one worker serves the XID events too (maintenance ends both). (Changed
    when the second NVML process went: the follower used to pause it.)"""

    def __init__(self) -> None:
        self.events = FakeEvents()


class Run:
    def __init__(self, follow: bool = True) -> None:
        self.follow_driver_upgrade = follow


class NodeHost:
    def __init__(self) -> None:
        self.node: Any = None

    def fact(self, name: str) -> Any:
        return self.node if name == "node" else None


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: List[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        fields = getattr(record, "fields", {})
        self.lines.append(record.getMessage() + " " + " ".join(f"{k}={v}" for k, v in
                                                               sorted(fields.items())))


def _logger() -> Any:
    logger = logging.getLogger("test-daemon-upgrade")
    logger.propagate = False
    records = Records()
    logger.handlers[:] = [records]
    logger.setLevel(logging.INFO)
    return logger, records


def test_the_follower_enters_keeps_and_leaves_once_each():
    logger, records = _logger()
    follower, host, client, monitor = UpgradeFollower(logger), NodeHost(), FakeClient(), Monitor()

    host.node = node("wait-for-jobs-required")
    follower.cycle(host, Run(), client, monitor)
    assert client.calls == [] and monitor.events.paused == [] and records.lines == []

    host.node = node("pod-restart-required")
    follower.cycle(host, Run(), client, monitor)
    follower.cycle(host, Run(), client, monitor)  # the same state: nothing again
    assert client.calls == [(True, f"GPU Operator driver upgrade: node label {KEY}="
                                   "pod-restart-required")]
    assert monitor.events.paused == []  # the client's maintenance covers the events
    assert len(records.lines) == 1 and "NVML maintenance on" in records.lines[0]
    assert "state=pod-restart-required" in records.lines[0]

    host.node = {"error": "connection refused"}  # API down: stay in maintenance
    follower.cycle(host, Run(), client, monitor)
    host.node = None
    follower.cycle(host, Run(), client, monitor)
    assert len(client.calls) == 1 and follower.state == "pod-restart-required"

    host.node = node("validation-required")
    follower.cycle(host, Run(), client, monitor)
    assert client.calls[-1] == (False, "") and monitor.events.paused == []
    assert follower.state is None
    assert "NVML maintenance off" in records.lines[-1]
    assert "previous=pod-restart-required" in records.lines[-1]


def test_the_reason_follows_the_state_while_in_maintenance():
    logger, _ = _logger()
    follower, host, client = UpgradeFollower(logger), NodeHost(), FakeClient()
    for state in ("pod-deletion-required", "drain-required", "pod-restart-required"):
        host.node = node(state)
        follower.cycle(host, Run(), client, None)
    assert [c[1].rsplit("=", 1)[1] for c in client.calls] == [
        "pod-deletion-required", "drain-required", "pod-restart-required"]
    assert all(on for on, _ in client.calls)


def test_leaving_with_the_flag_file_says_the_flag_still_holds_it():
    logger, records = _logger()
    follower, host, client = UpgradeFollower(logger), NodeHost(), FakeClient(flag=True)
    host.node = node("pod-restart-required")
    follower.cycle(host, Run(), client, None)
    host.node = node("upgrade-done")
    follower.cycle(host, Run(), client, None)
    assert client.calls[-1] == (False, "")
    assert "the maintenance flag file still holds it" in records.lines[-1]


def test_turned_off_it_leaves_and_reads_no_node():
    logger, _ = _logger()
    follower, host, client = UpgradeFollower(logger), NodeHost(), FakeClient()
    host.node = node("pod-restart-required")
    follower.cycle(host, Run(), client, None)
    follower.cycle(host, Run(follow=False), client, None)
    assert client.calls[-1] == (False, "") and follower.state is None

    class Refuses:
        def fact(self, name: str) -> Any:
            raise AssertionError("the Node must not be read")

    follower.cycle(Refuses(), Run(follow=False), client, None)
    assert len(client.calls) == 2


def test_nothing_to_release_reads_no_node():
    class Refuses:
        def fact(self, name: str) -> Any:
            raise AssertionError("the Node must not be read")

    logger, records = _logger()
    UpgradeFollower(logger).cycle(Refuses(), Run(), None, None)  # a bundle: no client, no stream
    assert records.lines == []


def test_a_fact_source_that_raises_keeps_the_mode():
    class Raises:
        def fact(self, name: str) -> Any:
            raise OSError("socket closed")

    logger, _ = _logger()
    follower, client = UpgradeFollower(logger), FakeClient()
    follower.state = "drain-required"
    follower.cycle(Raises(), Run(), client, None)
    assert client.calls == [] and follower.state == "drain-required"
