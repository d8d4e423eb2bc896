"""Event-driven verdicts through a real `run` scheduler (the Daemon serving in a thread, the real
XID monitor reading a FIFO in /dev/kmsg record format, the real gpu-xid check, the Publisher
over HTTPS to the API double): a fatal XID written to the kernel-log stand-in makes the
condition PATCH arrive with fast_interval and slow_interval at 600 s, so after the first
cycle only the event can explain it; with run.event_driven false nothing watches the kernel
log between cycles."""
import os
from pathlib import Path

import pytest

from agent.cli import resolve_policy
from agent.config import Config
from agent.daemon.sdnotify import Notifier
from agent.daemon.service import Daemon, Generation
from agent.logs import setup
from agent.outputs.node.publish import Publisher
from agent.xid.kernel_source import DeviceSource
from agent.xid.monitor import XidMonitor
from agent.xid.state import StateStore
from checks.xid.gpu_xid import GPU_XID
from tests.integration.agentproc import wait_for
from tests.kube_setup import NODE, serve_node
from tests.reliability.helpers import HEALTHY_ROOT, Running, tree_source

pytestmark = pytest.mark.integration
TREE_BOOT = (Path(HEALTHY_ROOT) / "proc/sys/kernel/random/boot_id").read_text().strip()
# A /dev/kmsg record (kernel Documentation/ABI/testing/dev-kmsg: "pri,seq,ts_usec,flags;msg")
# of the XID the kernel prints when a GPU falls off the bus (XID 79: tests/test_xid_eval.py).
XID79 = ("3,1,5000000,-;NVRM: Xid (PCI:0000:9b:00): 79, pid='<unknown>', name=<unknown>, "
         "GPU has fallen off the bus.\n")


@pytest.fixture
def api(tmp_path):
    yield from serve_node(tmp_path, token="t")


def _rig(tmp_path, kc, event_driven=True):
    config = Config.model_validate({
        "state_dir": str(tmp_path / "state"),
        "run": {"fast_interval": 600, "slow_interval": 600, "listen_address": "127.0.0.1:0",
                "event_driven": event_driven},
        "kube": {"kubeconfig": kc, "node_name": NODE, "request_timeout": 2},
    })
    gen = Generation(config, None, resolve_policy(config, None, "dra"), "dra", [])
    fifo = tmp_path / "kmsg"
    os.mkfifo(fifo)
    source = DeviceSource(str(fifo))  # the reader first, so the writer's open succeeds
    writer = os.open(fifo, os.O_WRONLY)
    monitor = XidMonitor(StateStore(str(tmp_path / "state"), TREE_BOOT), gen.policy.policy.xid,
                         source=source)
    monitor.start()
    pub = Publisher(config)
    d = Daemon([GPU_XID], lambda: gen, tree_source(HEALTHY_ROOT), "test", setup(),
               notifier=Notifier({}), outputs=[pub], xid_monitor=monitor)
    return d, monitor, pub, writer


def _condition(double):
    conds = double.nodes[NODE].get("status", {}).get("conditions", [])
    return next((c for c in conds if c["type"] == "GPUReady"), None)


def _status_patches(double):
    return [e for e in double.log if e["method"] == "PATCH" and e["path"].endswith("/status")]


def test_a_fatal_xid_in_the_kernel_log_reaches_the_node_before_the_next_cycle(api, tmp_path):
    double, kc = api
    d, monitor, pub, writer = _rig(tmp_path, kc)
    try:
        with Running(d):
            # the first (scheduled) cycle: the tree has no kernel log, gpu-xid is unknown
            wait_for(lambda: _condition(double) is not None, 20, "the first condition")
            assert _condition(double)["reason"] == "CheckUnknown"
            assert d.report.trigger == "schedule" and len(d.cycle_log) == 1
            before = len(_status_patches(double))
            os.write(writer, XID79.encode())
            wait_for(lambda: (_condition(double) or {}).get("reason") == "CheckFailed", 30,
                     "the condition naming the fault")
            cond = _condition(double)
            assert cond["status"] == "False" and "gpu-xid" in cond["message"]
            assert len(_status_patches(double)) == before + 1
            # no scheduled cycle ran in between (the next is 600 s away): the event's did
            assert d.report.trigger == "event" and d.events.evaluations >= 1
            assert "XID 79" in d.report.result("gpu-xid").summary
            assert d._kwatch is not None and d._kwatch.drains >= 1
            assert [f["code"] for f in monitor.state["faults"]] == [79]
    finally:
        os.close(writer)
        pub.close()


def test_with_event_driven_off_the_kernel_log_waits_for_the_cycle(api, tmp_path):
    double, kc = api
    d, monitor, pub, writer = _rig(tmp_path, kc, event_driven=False)
    try:
        with Running(d):
            wait_for(lambda: _condition(double) is not None, 20, "the first condition")
            os.write(writer, XID79.encode())
            # nothing reads the kernel log between cycles: the record is still in the FIFO
            # until the next cycle (600 s away), so no event and no watcher
            assert d._kwatch is None and d.events.notices == 0
            d.urgent_cycle()  # the fast cycle now, as the schedule would run it
            wait_for(lambda: (_condition(double) or {}).get("reason") == "CheckFailed", 30,
                     "the condition after the cycle")
            assert d.report.trigger == "schedule"
    finally:
        os.close(writer)
        pub.close()
