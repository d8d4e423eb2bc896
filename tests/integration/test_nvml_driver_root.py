"""NVML from the GPU Operator's driver root: the simulated libnvidia-ml (tests/nvml_sim) placed
only under <tmp>/run/nvidia/driver, as the operator's driver container exposes its root on the
host, and read by the real pynvml in the real NVML worker through the client, `check` and the
XID events of that same worker. The host's own loader path has no libnvidia-ml in these tests (asserted: a
worker without the root's library finds none).

Layouts (agent/host/driver_root.py cites them): Ubuntu-based driver images keep the library in
/usr/lib/x86_64-linux-gnu; the RHEL-style variant here sits in /usr/lib64/nvidia, a directory
only the root's /etc/ld.so.cache names (written by the real `ldconfig -r <root>` when this
runs as root with /sbin/ldconfig, else by the glibc dl-cache.h writer of the unit tests).
Expected values come from the scenario file, never from the snapshot under test.
(The XID test changed when the events moved into the one NVML worker: it drove a second
process, NvmlEventStream, which restarted by itself; now the client's next snapshot sees the
replaced file and starts one new worker, which waits for events again.)
"""
import ctypes.util
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Dict, List, Mapping

import pytest

from agent.cli_common import nvml_library_for
from agent.ldcache import ARCH_FLAGS, FLAG_ELF_LIBC6
from agent.nvml.client import NvmlClient
from checks.policy import ResolvedPolicy, load_policy
from tests.nvml_sim import simlib
from tests.unit.test_driver_root import new_cache

pytestmark = pytest.mark.integration  # needs gcc and NVIDIA's nvml.h (.ci/setup.d/20-nvml.sh)

REPO = Path(__file__).resolve().parents[2]
SONAME = "libnvidia-ml.so.1"
MULTIARCH = f"/usr/lib/{platform.machine()}-linux-gnu/"  # Debian multiarch tuple of this machine
LDCONFIG = "/sbin/ldconfig"


class Tree:
    def __init__(self, built: Dict[str, Path], tmp: Path) -> None:
        self.built = built
        self.root = tmp / "run/nvidia/driver"
        self.root.mkdir(parents=True)
        self.doc = simlib.resolve("healthy-8xh100.json")
        self.scenario = simlib.write_scenario(self.doc, tmp / "scenario.json")
        self.symbol_log = tmp / "missing-symbols.log"
        # No LD_LIBRARY_PATH: the library is found only through the driver root.
        self.env = simlib.worker_env(None, self.scenario, self.symbol_log)
        self.env["LD_PRELOAD"] = str(built["shim"])  # logs NVML symbols dlsym misses
        self.clients: List[NvmlClient] = []

    def place(self, rel: str) -> Path:
        path = self.root / rel.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(self.built["lib"], path)
        return path

    def policy(self) -> ResolvedPolicy:
        overrides = {"driver": {"managed_by_operator": True},
                     "operator": {"driver_root": str(self.root)}}
        return ResolvedPolicy(load_policy(2, overrides), "operator-clusterpolicy")

    def client(self) -> NvmlClient:
        client = NvmlClient(env=self.env, first_deadline_s=20.0,
                            library=nvml_library_for(self.policy()))
        self.clients.append(client)
        return client

    def uuids(self) -> List[str]:
        return [simlib.field(self.doc, i, "uuid") for i in range(len(self.doc["gpus"]))]


@pytest.fixture
def tree(nvml_sim_build, tmp_path):
    t = Tree(nvml_sim_build, tmp_path)
    yield t
    for client in t.clients:
        client.close()


def mapped_nvml(pid: int) -> List[str]:
    """The libnvidia-ml files a process has mapped (/proc/<pid>/maps' path column)."""
    with open(f"/proc/{pid}/maps") as fh:
        paths = {line.split(None, 5)[5].strip() for line in fh if len(line.split(None, 5)) == 6}
    return sorted(p for p in paths if "libnvidia-ml" in p)


def test_the_host_loader_path_has_no_libnvidia_ml(tree):
    """The premise: without the root's library the same worker environment finds none."""
    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("this machine has its own libnvidia-ml; the premise cannot be shown here")
    snap = NvmlClient(env=tree.env, first_deadline_s=20.0).snapshot()
    assert snap["error"]["kind"] == "library_not_found"
    assert snap["error"]["nvml_code"] == 12  # NVML_ERROR_LIBRARY_NOT_FOUND (nvml.h)


def test_ubuntu_layout_the_worker_reads_the_sims_gpus_from_exactly_that_file(tree):
    placed = tree.place(MULTIARCH + SONAME)
    client = tree.client()
    snap = client.snapshot()
    assert snap["error"] is None, snap["error"]
    assert [g["uuid"] for g in snap["gpus"]] == tree.uuids()
    assert snap["driver_version"] == tree.doc["driver_version"]
    assert mapped_nvml(snap["worker"]["pid"]) == [str(placed)]
    assert not tree.symbol_log.exists() or tree.symbol_log.read_text() == ""


def _write_cache(root: Path, lib_dir: str) -> str:
    """The root's ld.so.cache naming <lib_dir>/libnvidia-ml.so.1: ldconfig's when possible."""
    (root / "etc/ld.so.conf").parent.mkdir(parents=True, exist_ok=True)
    (root / "etc/ld.so.conf").write_text(lib_dir + "\n")
    if os.geteuid() == 0 and os.access(LDCONFIG, os.X_OK):
        subprocess.run([LDCONFIG, "-r", str(root)], check=True, timeout=60)
        return "ldconfig"
    (root / "etc/ld.so.cache").write_bytes(new_cache([(ARCH_FLAGS[platform.machine()] | FLAG_ELF_LIBC6, SONAME, f"{lib_dir}/{SONAME}")]))
    return "writer"


def test_rhel_variant_reached_only_through_the_roots_ld_so_cache(tree):
    placed = tree.place("/usr/lib64/nvidia/" + SONAME)  # not a directory the search lists
    made_by = _write_cache(tree.root, "/usr/lib64/nvidia")
    cache = (tree.root / "etc/ld.so.cache").read_bytes()
    assert cache.startswith(b"glibc-ld.so.cache1.1"), made_by
    assert b"/usr/lib64/nvidia/" + SONAME.encode() in cache
    snap = tree.client().snapshot()
    assert snap["error"] is None, (made_by, snap["error"])
    assert [g["uuid"] for g in snap["gpus"]] == tree.uuids()
    assert mapped_nvml(snap["worker"]["pid"]) == [str(placed)]


def test_before_the_operator_ran_no_worker_then_it_follows_the_driver_coming_and_changing(tree):
    client = tree.client()
    waiting = client.snapshot()
    assert waiting["error"]["kind"] == "library_not_found"
    assert str(tree.root) in waiting["error"]["message"]
    assert client.stats["spawns"] == 0 and client.worker_pid is None
    placed = tree.place("/usr/lib64/" + SONAME)  # the operator's driver container came up
    first = client.snapshot()
    assert first["error"] is None and len(first["gpus"]) == len(tree.doc["gpus"])
    again = client.snapshot()
    assert again["worker"]["pid"] == first["worker"]["pid"]  # same file: same worker
    fresh = placed.with_name("new")
    shutil.copy(tree.built["lib"], fresh)
    os.replace(fresh, placed)  # a new driver at the same path (new inode)
    upgraded = client.snapshot()
    assert upgraded["error"] is None
    assert upgraded["worker"]["pid"] != first["worker"]["pid"]
    placed.unlink()  # the driver container went away: NVML is released, not kept open
    gone = client.snapshot()
    assert gone["error"]["kind"] == "library_not_found" and client.worker_pid is None


def test_a_file_that_is_not_a_library_fails_naming_the_path(tree):
    bad = tree.root / "usr/lib64" / SONAME
    bad.parent.mkdir(parents=True)
    bad.write_text("not an ELF object\n")
    snap = tree.client().snapshot()
    assert snap["error"]["kind"] == "library_load_failed"
    assert str(bad) in snap["error"]["message"]


def test_the_one_worker_waits_for_xid_events_on_the_roots_library(tree):
    placed = tree.place(MULTIARCH + SONAME)
    seen: List[Dict[str, Any]] = []
    ready = threading.Event()

    def on_event(message: Mapping[str, Any]) -> None:
        seen.append(dict(message))
        if message.get("event") in ("ready", "error"):
            ready.set()

    client = tree.client()
    client.watch_xid(on_event)
    assert ready.wait(30), seen
    assert seen[0] == {"event": "ready", "gpus": len(tree.doc["gpus"])}, seen
    pid = client.worker_pid
    assert pid is not None and mapped_nvml(pid) == [str(placed)]
    ready.clear()
    fresh = placed.with_name("new")
    shutil.copy(tree.built["lib"], fresh)
    os.replace(fresh, placed)  # the operator's new driver at the same path
    snap = client.snapshot()  # sees the new file: the old worker stops, a new one reads
    assert snap["error"] is None and snap["worker"]["pid"] != pid
    assert ready.wait(30), seen  # the new worker's event set is registered
    assert client.stats["spawns"] == 2 and client.worker_pid == snap["worker"]["pid"]
    assert mapped_nvml(snap["worker"]["pid"]) == [str(placed)]


def test_check_on_an_operator_managed_host_reads_nvml_from_the_driver_root(tree, tmp_path):
    tree.place(MULTIARCH + SONAME)
    config = tmp_path / "config.yaml"
    config.write_text(
        "allocation_path: operator-clusterpolicy\n"
        f"gpu:\n  maintenance_flag: {tmp_path / 'no-flag'}\n"
        f"policy:\n  driver:\n    managed_by_operator: true\n"
        f"  operator:\n    driver_root: {tree.root}\n")
    res = subprocess.run(
        [sys.executable, "-m", "agent.cli", "check", "--config", str(config), "--format", "json",
         "--only", "nvml-responsive"],
        env=tree.env, cwd=REPO, capture_output=True, text=True, timeout=120)
    checks = {c["id"]: c for c in json.loads(res.stdout)["checks"]}
    assert checks["nvml-responsive"]["status"] == "pass", checks["nvml-responsive"]
    assert checks["nvml-responsive"]["details"]["device_count"] == len(tree.doc["gpus"])


def test_run_reads_nvml_once_the_operators_driver_appears(tree, tmp_path):
    """`run` with the operator owning the driver: before the root holds the library NVML is
    down (nvml-responsive waits for the operator's driver: skip within its grace period, which
    an unreadable uptime never passes); the library placed under the running agent is found
    at a later cycle (the client asks again before each snapshot) and NVML comes up."""
    from prometheus_client.parser import text_string_to_metric_families

    from tests.integration.agentproc import BUNDLES, http_get, start_agent, wait_for

    def metrics(port: int) -> Dict[str, List[Any]]:
        out: Dict[str, List[Any]] = {}
        body = http_get(f"http://127.0.0.1:{port}/metrics", timeout=10).decode()
        for fam in text_string_to_metric_families(body):
            for s in fam.samples:
                out.setdefault(s.name, []).append((s.labels, s.value))
        return out

    def nvml(port: int) -> Any:
        parsed = metrics(port)
        status = [lab["status"] for lab, v in parsed.get("gpu_node_agent_check_status", [])
                  if lab.get("check") == "nvml-responsive" and v == 1]
        up = parsed.get("gpu_node_agent_nvml_up") or [({}, None)]
        return (status[0] if status else None), up[0][1]

    config = ("allocation_path: operator-clusterpolicy\nrun:\n  fast_interval: 0.5\n"
              "gpu:\n  nvml_deadline_s: 5\n  nvml_first_deadline_s: 20\n"
              f"  maintenance_flag: {tmp_path / 'no-flag'}\n"
              "policy:\n  driver:\n    managed_by_operator: true\n"
              f"  operator:\n    driver_root: {tree.root}\n")
    root = str(BUNDLES / "host-foundation-only" / "root")
    agent, port = start_agent(tmp_path, ["--host-root", root, "--nvml"], config, env=tree.env)
    try:
        before = wait_for(lambda: (lambda s: s if s[0] else None)(nvml(port)), 60,
                          "a verdict on NVML before the operator's driver")
        assert before == ("skip", 0)
        tree.place(MULTIARCH + SONAME)
        wait_for(lambda: nvml(port) == ("pass", 1), 60, "NVML up from the driver root")
        assert agent.popen.poll() is None
    finally:
        agent.stop()
