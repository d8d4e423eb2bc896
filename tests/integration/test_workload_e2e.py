"""gpu-workload end to end on real containerd 1.7 and 2.1 (Debian's, unpacked by
.ci/setup.d/30-containerd.sh): the pre-join CRI route (a sandbox with the `nvidia` handler on
device-plugin paths, a container with the CDI request nvidia.com/gpu=all on DRA paths) and
the after-join native route (`ctr` in namespace gpu-node-agent), each failure step with its
message, the deadline, and no labelled object left behind.

The GPU is simulated twice over: a CDI spec whose device `all` bind-mounts a stand-in
`nvidia-smi` (a shell script printing `nvidia-smi -L` lines with the UUIDs of
bundles/gpu-capacity-8-of-8/gpus.json, NVIDIA's documented `GPU <i>: <name> (UUID: <uuid>)`
format), and a stand-in OCI runtime for the `nvidia` handler (a Python wrapper around the
real runc that adds the same mount when the process env asks for NVIDIA_VISIBLE_DEVICES, as
nvidia-container-runtime does, and hangs on `create` when told to). The image is built here
(tests/integration/containerd/support.py image_tar) and imported with `ctr images import`.
"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.host.seam import Host, StaticFacts, StaticGpus
from agent.host.workload import WorkloadFacts, WorkloadSpec
from agent.records import fields
from checks.policy import ResolvedPolicy, load_policy
from checks.workload.gpu_workload import GPU_WORKLOAD
from tests.components import component
from tests.integration.containerd.support import Daemon, containerd_17, containerd_21, image_tar

pytestmark = pytest.mark.integration
pytest.importorskip("grpc", reason="grpcio missing: pip install -e .[test]")
pytest.importorskip("cri_api.v1.api_pb2", reason="container-runtime-interface-api missing")

REPO = Path(__file__).resolve().parents[2]
GPUS = json.loads((REPO / "tests/fixtures/bundles/gpu-capacity-8-of-8/gpus.json").read_text())
UUIDS = [g["uuid"] for g in GPUS["gpus"]]
IMAGE = "localhost/gna-workload:e2e"
DEADLINE = 8.0
HANG_S = 12.0  # the stand-in runtime's hang: past the 3 s deadline the test gives the step
V2_DISABLED = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
               "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper"]
V3_DISABLED = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
               "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.erofs",
               "io.containerd.snapshotter.v1.blockfile"]

RUNTIME = '''#!{python}
"""Stand-in nvidia-container-runtime: adds the nvidia-smi mount to a container whose env
asks for NVIDIA_VISIBLE_DEVICES, hangs on `create` while {hang} exists, then execs runc."""
import json, os, sys, time
args = sys.argv[1:]
if "create" in args and "--bundle" in args:
    if os.path.exists("{hang}"):
        time.sleep(float(open("{hang}").read() or 3600))
    spec_path = os.path.join(args[args.index("--bundle") + 1], "config.json")
    spec = json.load(open(spec_path))
    if any(e.startswith("NVIDIA_VISIBLE_DEVICES=") for e in spec["process"].get("env", [])):
        spec["mounts"].append({{"destination": "/bin/nvidia-smi", "type": "bind",
                               "source": "{smi}", "options": ["rbind", "ro"]}})
        json.dump(spec, open(spec_path, "w"))
os.execv("{runc}", ["runc"] + args)
'''


def stand_ins(work: Path) -> None:
    (work / "bin").mkdir()
    (work / "cdi").mkdir()
    smi = work / "bin/nvidia-smi"
    lines = "".join(f"echo 'GPU {g['index']}: {g['name']} (UUID: {g['uuid']})'\n"
                    for g in GPUS["gpus"])
    smi.write_text("#!/bin/sh\n" + lines)
    smi.chmod(0o755)
    runtime = work / "bin/nvidia-container-runtime"
    runtime.write_text(RUNTIME.format(python=sys.executable, hang=work / "hang", smi=smi,
                                      runc=component("runc")))
    runtime.chmod(0o755)
    mount = {"hostPath": str(smi), "containerPath": "/bin/nvidia-smi",
             "options": ["ro", "nosuid", "nodev", "bind"]}
    spec = {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu",
            "devices": [{"name": "all", "containerEdits": {"mounts": [mount],
                                                           "env": ["GNA_CDI=all"]}}]}
    (work / "cdi/nvidia.yaml").write_text(json.dumps(spec))  # JSON is YAML


def config_17(work: Path) -> str:
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return (f'version = 2\nroot = "{work}/root"\nstate = "{work}/state"\n'
            f"disabled_plugins = {json.dumps(V2_DISABLED)}\n"
            f'[grpc]\n  address = "{work}/containerd.sock"\n'
            f'[ttrpc]\n  address = "{work}/containerd.sock.ttrpc"\n'
            f'[plugins."io.containerd.internal.v1.opt"]\n  path = "{work}/opt"\n'
            f'[{cri}]\n  enable_cdi = true\n  cdi_spec_dirs = ["{work}/cdi"]\n'
            f'  sandbox_image = "{IMAGE}"\n  restrict_oom_score_adj = true\n'
            f'[{cri}.containerd]\n  snapshotter = "native"\n'
            # a runtimes table replaces 1.7's default map: runc (default_runtime_name) again
            f'[{cri}.containerd.runtimes.runc]\n  runtime_type = "io.containerd.runc.v2"\n'
            f'[{cri}.containerd.runtimes.nvidia]\n  runtime_type = "io.containerd.runc.v2"\n'
            f'[{cri}.containerd.runtimes.nvidia.options]\n'
            f'  BinaryName = "{work}/bin/nvidia-container-runtime"\n'
            f'[{cri}.cni]\n  bin_dir = "{work}/cni/bin"\n  conf_dir = "{work}/cni/conf"\n')


def config_21(work: Path) -> str:
    rt = 'plugins."io.containerd.cri.v1.runtime"'
    return (f'version = 3\nroot = "{work}/root"\nstate = "{work}/state"\n'
            f"disabled_plugins = {json.dumps(V3_DISABLED)}\n"
            f'[grpc]\n  address = "{work}/containerd.sock"\n'
            f'[ttrpc]\n  address = "{work}/containerd.sock.ttrpc"\n'
            '[[plugins."io.containerd.transfer.v1.local".unpack_config]]\n'
            '  platform = "linux/amd64"\n  snapshotter = "native"\n'
            '[plugins."io.containerd.cri.v1.images"]\n  snapshotter = "native"\n'
            f'[plugins."io.containerd.cri.v1.images".pinned_images]\n  sandbox = "{IMAGE}"\n'
            f'[{rt}]\n  enable_cdi = true\n  cdi_spec_dirs = ["{work}/cdi"]\n'
            '  restrict_oom_score_adj = true\n'
            f'[{rt}.containerd.runtimes.nvidia]\n  runtime_type = "io.containerd.runc.v2"\n'
            f'[{rt}.containerd.runtimes.nvidia.options]\n'
            f'  BinaryName = "{work}/bin/nvidia-container-runtime"\n'
            f'[{rt}.cni]\n  bin_dirs = ["{work}/cni/bin"]\n  conf_dir = "{work}/cni/conf"\n')


@pytest.fixture(scope="module", params=["1.7", "2.1"])
def daemon(request, tmp_path_factory):
    binary = containerd_17() if request.param == "1.7" else containerd_21()
    work = tmp_path_factory.mktemp(f"containerd-{request.param}")
    stand_ins(work)
    config = work / "config.toml"
    config.write_text((config_17 if request.param == "1.7" else config_21)(work))
    d = Daemon(binary, config, work)
    d.version, d.work = request.param, work
    try:
        d.start()
        imp = d.ctr("images", "import", "--snapshotter", "native",
                    str(image_tar(work / "img.tar", IMAGE)))
        assert imp.returncode == 0, imp.stderr
        yield d
    finally:
        d.stop()


def spec(daemon, path: str, route: str = "cri", **kw) -> WorkloadSpec:
    base = dict(path=path, mode="cdi" if path == "dra" else "handler", handler="nvidia",
                image=IMAGE, command=["nvidia-smi", "-L"], cdi_device="nvidia.com/gpu=all",
                socket=str(daemon.socket), namespace="gpu-node-agent",
                ctr=str(Path(daemon.binary).with_name("ctr")),
                containerd_config=str(daemon.config), step_deadline_s=DEADLINE,
                cleanup_deadline_s=DEADLINE, route=route,
                extra={"containerd": daemon.binary})
    base.update(kw)
    return WorkloadSpec(**base)


def verdict(s: WorkloadSpec, gpus=None):
    facts = WorkloadFacts(StaticFacts({}), s)
    host = Host("/nonexistent", facts=facts, gpus=StaticGpus(gpus or GPUS))
    settings = {"workload": {"paths": [s.path]}}
    outcome = GPU_WORKLOAD.run(host, ResolvedPolicy(load_policy(2), s.path, settings=settings))
    return outcome, facts.fact("workload")


def leftovers(daemon, namespace: str = "k8s.io") -> list:
    """Every container, task, active snapshot and lease in the namespace, and every CRI
    sandbox carrying our label: after a run, all of them must be gone."""
    import grpc
    from cri_api.v1 import api_pb2 as cri
    from cri_api.v1 import api_pb2_grpc

    found = []
    for what in (("containers", "ls", "-q"), ("tasks", "ls", "-q"), ("leases", "ls", "-q")):
        out = daemon.ctr(*what, namespace=namespace).stdout
        found += [f"{what[0]} {line}" for line in out.split() if line.strip()]
    snaps = daemon.ctr("snapshots", "--snapshotter", "native", "ls", namespace=namespace).stdout
    found += [f"snapshot {line.split()[0]}" for line in snaps.splitlines() if " Active" in line]
    with grpc.insecure_channel(f"unix://{daemon.socket}") as channel:
        rt = api_pb2_grpc.RuntimeServiceStub(channel)
        sel = cri.PodSandboxFilter(label_selector={"gpu-node-agent.workload": "1"})
        items = rt.ListPodSandbox(cri.ListPodSandboxRequest(filter=sel), timeout=10).items
    return found + [f"sandbox {sb.id}" for sb in items]


def settled_leftovers(daemon, namespace: str = "k8s.io", within: float = 5.0) -> list:
    """leftovers() once containerd's garbage collector has had its turn: a snapshot whose
    container containerd deleted itself (a failed CreateContainer) goes with the next
    collection (containerd docs/garbage-collection.md), not with the call. Bounded."""
    deadline = time.monotonic() + within
    while True:
        found = leftovers(daemon, namespace)
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


@pytest.mark.parametrize("path", ["dra", "device-plugin"])
def test_cri_route_passes(daemon, path):
    outcome, rec = verdict(spec(daemon, path))
    assert outcome.status == "pass", (outcome.summary, rec, daemon.log_tail())
    assert rec["route"] == "cri" and sorted(outcome.details["container_uuids"]) == sorted(UUIDS)
    assert rec["cleanup"]["left"] == [] and settled_leftovers(daemon) == []


CASES = [
    # (case, spec overrides, expected code, words the summary holds)
    ("image", {"image": "localhost:1/absent:1"}, "image-missing", "localhost:1/absent:1"),
    ("sandbox", {"path": "device-plugin", "handler": "missing"},
     "sandbox-failed", "missing"),
    ("create", {"cdi_device": "nvidia.com/gpu=nope"}, "create-failed", "nvidia.com/gpu=nope"),
    ("start", {"command": ["/no/such/binary"]}, "start-failed", "/no/such/binary"),
    ("exit", {"command": ["sh", "-c", "echo broken; exit 3"]}, "exit-nonzero", "exited 3"),
]


@pytest.mark.parametrize("case,over,code,words", CASES, ids=[c[0] for c in CASES])
def test_cri_route_names_each_failing_step(daemon, case, over, code, words):
    path = over.get("path", "dra")
    outcome, rec = verdict(spec(daemon, path, **{k: v for k, v in over.items() if k != "path"}))
    assert outcome.status == "fail" and outcome.code == code, (outcome.summary, rec)
    assert words in outcome.summary and rec["failed_step"] == case
    assert rec["cleanup"]["left"] == [] and settled_leftovers(daemon) == []


def test_output_mismatch_names_the_missing_gpu(daemon):
    nine = dict(GPUS, gpus=GPUS["gpus"] + [dict(GPUS["gpus"][0], index=8,
                                                uuid="GPU-09000900-0000-0000-0000-000000000000")])
    outcome, _ = verdict(spec(daemon, "dra"), gpus=nine)
    assert outcome.code == "output-mismatch"
    assert "missing GPU-09000900-0000-0000-0000-000000000000" in outcome.summary


def test_cri_deadline_fails_in_time_and_leaves_nothing(daemon):
    (daemon.work / "hang").write_text(str(HANG_S))
    started = time.monotonic()
    try:
        outcome, rec = verdict(spec(daemon, "device-plugin", step_deadline_s=3.0))
        took = time.monotonic() - started
    finally:
        os.unlink(daemon.work / "hang")
    assert outcome.status == "fail" and outcome.code == "deadline", (outcome.summary, rec)
    assert "`sandbox` past its 3.0s deadline" in outcome.summary
    assert took < 3.0 + 5.0
    # Once the hung runtime returns, the next run removes what the hung one left (the
    # sandbox containerd still holds), and then nothing is left at all.
    time.sleep(max(0.0, HANG_S - (time.monotonic() - started)) + 1.0)
    again, rec2 = verdict(spec(daemon, "device-plugin"))
    assert again.status == "pass", (again.summary, rec2)
    assert settled_leftovers(daemon) == []


@pytest.mark.parametrize("path", ["dra", "device-plugin"])
def test_native_route_passes_in_its_own_namespace(daemon, path):
    outcome, rec = verdict(spec(daemon, path, route="native"))
    assert outcome.status == "pass", (outcome.summary, rec, daemon.log_tail())
    assert rec["route"] == "native" and sorted(outcome.details["container_uuids"]) == sorted(UUIDS)
    # Nothing in k8s.io (the kubelet's namespace) nor left in ours.
    assert settled_leftovers(daemon) == [] and settled_leftovers(daemon, "gpu-node-agent") == []


NATIVE_CASES = [
    ("image", {"image": "localhost:1/absent:1"}, "image-missing", "localhost:1/absent:1"),
    ("sandbox", {"path": "device-plugin", "handler": "missing"}, "sandbox-failed",
     'no runtime for "missing"'),
    ("create", {"cdi_device": "nvidia.com/gpu=nope"}, "create-failed", "nvidia.com/gpu=nope"),
    ("start", {"command": ["/no/such/binary"]}, "start-failed", "/no/such/binary"),
    ("exit", {"command": ["sh", "-c", "echo broken; exit 3"]}, "exit-nonzero", "exited 3"),
]


@pytest.mark.parametrize("case,over,code,words", NATIVE_CASES, ids=[c[0] for c in NATIVE_CASES])
def test_native_route_names_each_failing_step(daemon, case, over, code, words):
    path = over.get("path", "dra")
    rest = {k: v for k, v in over.items() if k != "path"}
    outcome, rec = verdict(spec(daemon, path, route="native", **rest))
    assert outcome.status == "fail" and outcome.code == code, (outcome.summary, rec)
    assert words in outcome.summary and rec["failed_step"] == case
    assert settled_leftovers(daemon, "gpu-node-agent") == []


def test_native_deadline_fails_in_time_and_leaves_nothing(daemon):
    (daemon.work / "hang").write_text(str(HANG_S))
    started = time.monotonic()
    try:
        outcome, rec = verdict(spec(daemon, "device-plugin", route="native", step_deadline_s=3.0))
        took = time.monotonic() - started
    finally:
        os.unlink(daemon.work / "hang")
    assert outcome.status == "fail" and outcome.code == "deadline", (outcome.summary, rec)
    assert "`start` past its 3.0s deadline" in outcome.summary
    assert took < 3.0 + 5.0, rec
    time.sleep(max(0.0, HANG_S - (time.monotonic() - started)) + 1.0)
    again, rec2 = verdict(spec(daemon, "device-plugin", route="native"))
    assert again.status == "pass", (again.summary, rec2)
    assert settled_leftovers(daemon, "gpu-node-agent") == []


CHILD = """
import json, sys
from agent.host.workload import WorkloadSpec, run_workload
run_workload(WorkloadSpec(**json.loads(sys.argv[1])))
"""


@pytest.mark.parametrize("route", ["cri", "native"])
def test_sigkill_mid_run_leaves_nothing_after_the_next_run(daemon, route):
    s = spec(daemon, "dra", route=route, command=["sleep", "30"], step_deadline_s=40.0)
    ns = "k8s.io" if route == "cri" else "gpu-node-agent"
    child = subprocess.Popen([sys.executable, "-c", CHILD, json.dumps({f.name: getattr(s, f.name) for f in fields(s)})],
                             cwd=REPO, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        running = []
        while time.monotonic() < deadline and len(running) < (2 if route == "cri" else 1):
            running = daemon.ctr("tasks", "ls", "-q", namespace=ns).stdout.split()
            time.sleep(0.2)
        assert running, daemon.log_tail()
    finally:
        os.kill(child.pid, signal.SIGKILL)  # mid-run: the container is running
        child.wait(timeout=10)
    assert leftovers(daemon, ns) != []  # the kill did leave objects behind
    outcome, rec = verdict(spec(daemon, "dra", route=route))
    assert outcome.status == "pass", (outcome.summary, rec)
    assert any(r.startswith(("sandbox", "container")) for r in rec["cleanup"]["removed"]), rec
    assert settled_leftovers(daemon, ns) == []


def test_collect_with_workload_records_and_the_bundle_replays(daemon, tmp_path):
    """`collect --with-workload`'s path: the run's record goes into host.json with the
    snapshot, and `check --bundle` judges it without a runtime."""
    from agent.host.bundle import load_bundle
    from agent.host.collect import collect

    s = spec(daemon, "dra", command=["sh", "-c", "nvidia-smi -L | head -n 7"])
    host = Host(str(tmp_path / "empty"), facts=WorkloadFacts(StaticFacts({}), s),
                gpus=StaticGpus(GPUS))
    (tmp_path / "empty").mkdir()
    target = collect(host, [GPU_WORKLOAD], str(tmp_path / "bundle"))
    recorded = json.loads((target / "host.json").read_text())["workload"]
    assert recorded["route"] == "cri" and recorded["exit_code"] == 0
    loaded = load_bundle(target)
    try:
        settings = {"workload": {"paths": []}}  # replay needs no opt-in: the record is there
        outcome = GPU_WORKLOAD.run(loaded.host,
                                   ResolvedPolicy(load_policy(2), "dra", settings=settings))
    finally:
        loaded.close()
    assert outcome.status == "fail" and outcome.code == "output-mismatch"
    assert f"missing {UUIDS[7]}" in outcome.summary
