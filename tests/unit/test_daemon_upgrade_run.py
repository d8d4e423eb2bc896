"""A `run` cycle under the GPU Operator's driver upgrade, with the real NVML client (its one
worker serves snapshots and XID events) around a stand-in worker process (no NVML: the child
answers the client's JSON-lines protocol, agent/nvml/worker.py's docstring). The Node comes
from a fact source the test changes between cycles, as the API-backed `node` fact would.
(Changed when XID events moved into the one NVML worker: these tests drove a second events
process, NvmlEventStream, and checked that it paused too; now maintenance ends the one
worker, so "no NVML process at all" is one PID, and the events resume with the next worker.)

State names: NVIDIA/k8s-operator-libs pkg/upgrade/consts.go; label key: its
UpgradeStateLabelKeyFmt with the GPU Operator's driver name "gpu"."""
import contextlib
import sys
import time
from pathlib import Path
from typing import Any, Dict, Iterator, Optional

from agent.config import Config
from agent.daemon.inputs import Generation, Source
from agent.daemon.sdnotify import Notifier
from agent.daemon.service import Daemon
from agent.host.seam import Host
from agent.logs import setup
from agent.model import Interval, Status
from agent.nvml.client import NvmlClient
from checks.nvml_responsive import NVML_RESPONSIVE
from checks.policy import ResolvedPolicy, load_policy
from tests.reliability.helpers import HEALTHY_ROOT

KEY = "nvidia.com/gpu-driver-upgrade-state"

# The one worker's two roles: with `--events` it says ready (its event set registered), then
# answers requests like any worker.
WORKER = """\
import json, sys
SNAP = {"schema_version": 1, "source": "nvml", "error": None, "nvml_version": "13.580.95.05",
        "driver_version": "580.95.05", "device_count": 0, "gpus": []}
if "--events" in sys.argv:
    print(json.dumps({"event": "ready", "gpus": 0}), flush=True)
for line in sys.stdin:
    req = json.loads(line)
    if req.get("op") == "exit":
        break
    reply = {"id": req.get("id"), "ok": True}
    if req.get("op") == "snapshot":
        reply["snapshot"] = SNAP
    print(json.dumps(reply), flush=True)
"""


def _fake_python(tmp_path: Path) -> str:
    script = tmp_path / "python"
    script.write_text(f"#!{sys.executable}\n{WORKER}")
    script.chmod(0o755)
    return str(script)


class Facts:
    """The `node` fact, as agent/kube/facts.py answers it (a Node, or {"error": ...})."""

    def __init__(self) -> None:
        self.node: Any = {"metadata": {"name": "gpu-1", "labels": {}}}

    def label(self, state: Optional[str]) -> None:
        labels: Dict[str, str] = {} if state is None else {KEY: state}
        self.node = {"metadata": {"name": "gpu-1", "labels": labels}}

    def fact(self, name: str) -> Any:
        return self.node if name == "node" else None


class Monitor:
    """The XID monitor as the daemon sees it: the NVML events it was handed, nothing recorded."""

    def __init__(self, client: NvmlClient) -> None:
        self.ready = 0  # "ready" events: one per worker that registered its event set
        client.watch_xid(self.on_nvml_message)

    def on_nvml_message(self, message: Any) -> None:
        self.ready += message.get("event") == "ready"

    def cycle(self, snapshot: Any) -> None:
        pass


def _until(predicate: Any, limit_s: float = 10.0) -> bool:
    """Poll, bounded in time and count: the event stream restarts in its own thread."""
    for _ in range(int(limit_s / 0.05)):
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def _generation(follow: bool = True) -> Generation:
    config = Config.model_validate({"run": {
        "fast_interval": 60, "listen_address": "127.0.0.1:0",
        "follow_driver_upgrade": follow}})
    return Generation(config, None, ResolvedPolicy(load_policy(2), "dra"), "dra", [])


@contextlib.contextmanager
def running(tmp_path: Path, flag: Optional[Path] = None) -> Iterator[Any]:
    python = _fake_python(tmp_path)
    client = NvmlClient(python=python, first_deadline_s=20, deadline_s=20,
                        maintenance_flag=None if flag is None else str(flag))
    facts = Facts()

    def opener(gen: Any) -> Any:
        return contextlib.nullcontext(Host(HEALTHY_ROOT, gpus=client, facts=facts))

    gen = _generation()
    daemon = Daemon([NVML_RESPONSIVE], lambda: gen, Source(opener, None, client), "test",
                    setup(), notifier=Notifier({}), xid_monitor=(monitor := Monitor(client)))
    try:
        yield daemon, client, monitor, facts
    finally:
        daemon.server.stop()
        client.close()


def _nvml(daemon: Daemon) -> Any:
    result = daemon.run_cycle([Interval.FAST]).result("nvml-responsive")
    assert result is not None
    return result


def test_pod_restart_required_releases_nvml_and_upgrade_done_reads_again(tmp_path):
    with running(tmp_path) as (daemon, client, monitor, facts):
        assert _nvml(daemon).status == Status.PASS
        assert client.worker_pid is not None and client.stats["spawns"] == 1
        assert monitor.ready == 1  # started by watch_xid, before the first cycle

        facts.label("pod-restart-required")
        result = _nvml(daemon)
        assert client.worker_pid is None and client.in_maintenance  # no NVML process at all
        assert result.status == Status.UNKNOWN
        assert f"{KEY}=pod-restart-required" in result.summary
        assert "GPU Operator driver upgrade" in result.summary
        assert daemon.report is not None and daemon.report.gpus is not None
        assert daemon.report.gpus["error"]["kind"] == "maintenance"

        facts.node = {"error": "Get https://127.0.0.1:6443/api/v1/nodes/gpu-1: EOF"}
        assert _nvml(daemon).status == Status.UNKNOWN  # API down: still in maintenance
        assert client.worker_pid is None and client.stats["spawns"] == 1

        facts.label("upgrade-done")
        result = _nvml(daemon)
        assert result.status == Status.PASS and "answered" in result.summary
        assert client.stats["spawns"] == 2 and client.worker_pid is not None  # a fresh worker
        assert _until(lambda: monitor.ready == 2)  # and its events again


def test_the_flag_file_holds_maintenance_after_upgrade_done(tmp_path):
    flag = tmp_path / "nvml-maintenance"
    with running(tmp_path, flag) as (daemon, client, monitor, facts):
        facts.label("pod-restart-required")
        assert _nvml(daemon).status == Status.UNKNOWN
        flag.write_text("")
        facts.label("upgrade-done")
        result = _nvml(daemon)
        assert result.status == Status.UNKNOWN and "NVML not read: maintenance" in result.summary
        assert KEY not in result.summary  # the upgrade is over; the flag file holds it now
        # the worker watch_xid started before the first cycle, and none since
        assert client.worker_pid is None and client.stats["spawns"] == 1 and monitor.ready == 1
        flag.unlink()
        assert _nvml(daemon).status == Status.PASS and client.stats["spawns"] == 2
        assert _until(lambda: monitor.ready == 2)  # the fresh worker waits for events again


def test_follow_driver_upgrade_false_keeps_nvml(tmp_path):
    with running(tmp_path) as (daemon, client, monitor, facts):
        daemon.gen = _generation(follow=False)
        facts.label("pod-restart-required")
        assert _nvml(daemon).status == Status.PASS
        assert client.worker_pid is not None and not client.in_maintenance
