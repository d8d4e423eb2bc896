"""gpu-workload's record: what one run asked for (WorkloadSpec) and what it did, step by step
(Attempt). The record is the host fact `workload` (agent/host/workload.py); bundles hold it in
host.json and checks/workload/gpu_workload.py judges it."""
import time
from typing import Any, Dict, List, Optional

from agent.records import field, record

LABEL = "gpu-node-agent.workload"
LABEL_VALUE = "1"
OUTPUT_CAP = 64 * 1024
STEPS = ("tool", "runtime", "image", "sandbox", "create", "start", "exit")


@record
class WorkloadSpec:
    path: str
    mode: str  # "handler" (device-plugin paths) or "cdi" (DRA paths)
    handler: str
    image: str
    command: List[str]
    cdi_device: str
    socket: str
    namespace: str
    ctr: str = "ctr"
    containerd_config: str = "/etc/containerd/config.toml"
    step_deadline_s: float = 60.0
    cleanup_deadline_s: float = 30.0
    kubelet_socket: str = "/var/lib/kubelet/pod-resources/kubelet.sock"
    route: str = "auto"
    extra: Dict[str, Any] = field(default_factory=dict)


class Attempt:
    """What one run did, step by step; ``record()`` is the fact's value."""

    def __init__(self, spec: WorkloadSpec, route: str) -> None:
        self.spec, self.route = spec, route
        self.failed_step: Optional[str] = None
        self.deadline_hit = False
        self.error = ""
        self.exit_code: Optional[int] = None
        self.output = ""
        self.image_missing = False
        self.cleanup_removed: List[str] = []
        self.cleanup_left: List[str] = []
        self.notes: List[str] = []
        self.started = time.monotonic()

    def fail(self, step: str, error: str, deadline: bool = False) -> None:
        if self.failed_step is None:
            self.failed_step, self.error, self.deadline_hit = step, error[:2000], deadline

    def record(self) -> Dict[str, Any]:
        return {
            "route": self.route, "mode": self.spec.mode, "path": self.spec.path,
            "handler": self.spec.handler if self.spec.mode == "handler" else None,
            "cdi_device": self.spec.cdi_device if self.spec.mode == "cdi" else None,
            "image": self.spec.image, "command": list(self.spec.command),
            "ok": self.failed_step is None, "failed_step": self.failed_step,
            "deadline_hit": self.deadline_hit, "deadline_s": self.spec.step_deadline_s,
            "error": self.error, "exit_code": self.exit_code,
            "output": self.output[:OUTPUT_CAP], "image_missing": self.image_missing,
            "cleanup": {"removed": self.cleanup_removed, "left": self.cleanup_left},
            "notes": self.notes,
            "elapsed_s": round(time.monotonic() - self.started, 3),
        }


