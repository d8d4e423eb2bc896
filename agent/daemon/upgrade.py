"""`run` following the GPU Operator's driver upgrade on this node: NVML maintenance while the
operator replaces the driver, so no NVML handle of the agent's keeps the kernel module in use.

The operator's upgrade controller (NVIDIA/k8s-operator-libs, pkg/upgrade/consts.go) walks each
node through states it writes into the Node label ``nvidia.com/<driver>-driver-upgrade-state``
(UpgradeStateLabelKeyFmt "nvidia.com/%s-driver-upgrade-state"); the GPU Operator names its
driver "gpu" (NVIDIA/gpu-operator cmd/gpu-operator/main.go: ``upgrade.SetDriverName("gpu")``).
The new driver container unloads the old kernel module, which fails while any process holds
``/dev/nvidia*`` open: the NVML worker does (docs/runbook-nvml.md).

``decide(node)`` is pure: the Node (the ``node`` host fact: the Node object, ``{"error": ...}``
or None) to enter, leave or keep. ``UpgradeFollower`` applies it each cycle to the NVML client
(``maintenance(on, reason=...)``, kept apart from the operator's flag file by the client),
whose one worker serves both the snapshots and the XID events (agent/nvml/client.py). Which
states release NVML, and why, is docs/decisions.md ("run: NVML maintenance during a GPU
Operator driver upgrade").
"""
import logging
from enum import Enum
from typing import Any, Mapping, Optional

from agent.driver_layout import DRIVER_REPLACED_STATES, UPGRADE_STATE_LABEL
from agent.logs import log
from agent.records import record

LABEL = UPGRADE_STATE_LABEL

# The state names of NVIDIA/k8s-operator-libs pkg/upgrade/consts.go (UpgradeState* constants).
# Release NVML from the first state that removes the GPU workloads to let the driver go (pod
# deletion, drain, or the maintenance operator's drain) until the driver pod is restarted
# (agent/driver_layout.py DRIVER_REPLACED_STATES); the earlier ones give the agent's cached
# Node read time to see the label before pod-restart-required deletes the driver pod.
ENTER_STATES = DRIVER_REPLACED_STATES
# Hold NVML as usual: before the workloads are removed (the GPUs still serve jobs, whose XIDs
# the event stream reports), and from validation-required on: the controller moves a node
# there only once the new driver pod is in sync and Ready (ProcessPodRestartNodes), so the
# module is loaded again and the agent's own reading is due before the node is uncordoned.
# upgrade-failed is terminal until someone acts: the agent reports what NVML sees. The empty
# value is UpgradeStateUnknown (the upgrade flow is off or has not reached the node).
LEAVE_STATES = frozenset({
    "",
    "upgrade-required",
    "cordon-required",
    "wait-for-jobs-required",
    "validation-required",
    "uncordon-required",
    "upgrade-done",
    "upgrade-failed",
})


class Action(str, Enum):
    ENTER = "enter"  # release NVML
    LEAVE = "leave"  # hold NVML as usual
    KEEP = "keep"  # cannot tell: stay as we are (never flap on an unreadable Node)


@record(frozen=True)
class Decision:
    action: Action
    state: Optional[str]  # the label's value; None when absent or not read
    why: str


def decide(node: Any) -> Decision:
    """What the Node's upgrade-state label asks of NVML. An unreadable Node, a label that is
    not a string, or a state this table does not know (a newer controller) keeps the current
    mode; every upgrade ends in upgrade-done or upgrade-failed, which leave."""
    if node is None:
        return Decision(Action.KEEP, None, "the Node was not read")
    if not isinstance(node, Mapping):
        return Decision(Action.KEEP, None, "the Node is not an object")
    if "error" in node and "metadata" not in node:
        return Decision(Action.KEEP, None, f"the Node could not be read: {node.get('error')}")
    meta = node.get("metadata")
    if not isinstance(meta, Mapping):
        return Decision(Action.KEEP, None, "the Node has no metadata")
    labels = meta.get("labels")
    if labels is None:
        labels = {}
    if not isinstance(labels, Mapping):
        return Decision(Action.KEEP, None, "the Node's labels are not an object")
    if LABEL not in labels:
        return Decision(Action.LEAVE, None, f"no {LABEL} label")
    state = labels[LABEL]
    if not isinstance(state, str):
        return Decision(Action.KEEP, None, f"{LABEL} is not a string")
    if state in ENTER_STATES:
        return Decision(Action.ENTER, state, f"{LABEL}={state}: the driver is being replaced")
    if state in LEAVE_STATES:
        return Decision(Action.LEAVE, state, f"{LABEL}={state}")
    return Decision(Action.KEEP, state, f"{LABEL}={state}: a state this agent does not know")


def reason(state: str) -> str:
    """Why NVML is released, as nvml-responsive's summary shows it."""
    return f"GPU Operator driver upgrade: node label {LABEL}={state}"


class UpgradeFollower:
    """The daemon's side: the Node's decision applied to the NVML client (snapshots and XID
    events: one worker), once per cycle, before the checks run. ``state`` is the upgrade state
    that put NVML in maintenance (None: not in upgrade maintenance). ``monitor`` is unused
    (the XID monitor's NVML events come from the same client)."""

    def __init__(self, logger: logging.Logger) -> None:
        self.log = logger
        self.state: Optional[str] = None

    def cycle(self, host: Any, run: Any, gpus: Any, monitor: Any) -> None:
        client = gpus if callable(getattr(gpus, "maintenance", None)) else None
        if client is None:
            return  # nothing holds NVML here (a bundle, a tree): nothing to release
        if not getattr(run, "follow_driver_upgrade", True):
            if self.state is not None:
                self._leave(client, "run.follow_driver_upgrade is false")
            return
        try:
            node = host.fact("node")
        except Exception as exc:  # an API fact source that raised: unreadable, keep
            node = {"error": f"{type(exc).__name__}: {exc}"}
        decision = decide(node)
        if decision.action is Action.ENTER and decision.state != self.state:
            assert decision.state is not None
            self._enter(client, decision.state)
        elif decision.action is Action.LEAVE and self.state is not None:
            self._leave(client, decision.why)

    def _enter(self, client: Any, state: str) -> None:
        try:
            client.maintenance(True, reason=reason(state))
        except Exception as exc:  # tried again next cycle (self.state unchanged)
            log(self.log, logging.ERROR, "could not enter NVML maintenance for the driver "
                "upgrade", state=state, error=f"{type(exc).__name__}: {exc}")
            return
        first, self.state = self.state is None, state
        log(self.log, logging.WARNING if first else logging.INFO,
            "GPU Operator driver upgrade on this node: NVML maintenance on, the agent holds no "
            "NVML handle" if first else "GPU Operator driver upgrade: NVML maintenance goes on",
            label=LABEL, state=state)

    def _leave(self, client: Any, why: str) -> None:
        try:
            client.maintenance(False)
            check = getattr(client, "check_maintenance_flag", None)
            still = bool(check()) if callable(check) else False
        except Exception as exc:
            log(self.log, logging.ERROR, "could not leave NVML maintenance after the driver "
                "upgrade", state=self.state, error=f"{type(exc).__name__}: {exc}")
            return
        previous, self.state = self.state, None
        log(self.log, logging.INFO,
            "GPU Operator driver upgrade: NVML maintenance off"
            + ("; the maintenance flag file still holds it" if still else ""),
            label=LABEL, previous=previous, now=why)
