"""gpu-workload's CRI route removes the container-log temp directories a SIGKILLed run left:
only ours (name, uid, a directory), older than a run's deadline, whose pid is gone."""
import os
import subprocess
import sys
import tempfile
import time
import types
from unittest import mock

import agent.host.workload_cri as cri_route
from agent.host.workload_cri import remove_stale, run_deadline_s
from agent.host.workload_record import WorkloadSpec

HOUR = 3600


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", ""])
    proc.wait()
    return proc.pid


def aged(path, seconds_ago: float):
    path.mkdir()
    (path / "gpu.log").write_text("x\n")
    then = time.time() - seconds_ago
    os.utime(path, (then, then))
    return path


def spec(**kw) -> WorkloadSpec:
    return WorkloadSpec(path="dra", mode="cdi", handler="", image="img", command=["true"],
                        cdi_device="nvidia.com/gpu=all", socket="/nonexistent.sock",
                        namespace="k8s.io", **kw)


def test_the_run_deadline_counts_every_step_and_both_cleanups():
    # 7 step calls of 60 s and 6 cleanup calls of 30 s (the WorkloadSpec defaults).
    assert run_deadline_s(spec()) == 7 * 60 + 6 * 30
    assert run_deadline_s(spec(step_deadline_s=10, cleanup_deadline_s=5)) == 100


def test_only_ours_old_and_orphaned_is_removed(tmp_path):
    gone = dead_pid()
    stale = aged(tmp_path / f"gna-workload-{gone}-abc", HOUR)
    running = aged(tmp_path / f"gna-workload-{os.getpid()}-abc", HOUR)  # process alive
    fresh = aged(tmp_path / f"gna-workload-{gone}-new", 10)  # younger than the deadline
    other = aged(tmp_path / f"gna-bundle-{gone}-abc", HOUR)  # not this route's name
    unnamed = aged(tmp_path / "gna-workload-notapid", HOUR)
    target = aged(tmp_path / "elsewhere", HOUR)
    os.symlink(target, tmp_path / f"gna-workload-{gone}-lnk")  # a link is never followed
    assert remove_stale(str(tmp_path), 600) == [stale.name]
    assert not stale.exists()
    for kept in (running, fresh, other, unnamed, target):
        assert (kept / "gpu.log").read_text() == "x\n", kept.name


def test_another_users_directory_is_kept(tmp_path, monkeypatch):
    stale = aged(tmp_path / f"gna-workload-{dead_pid()}-abc", HOUR)
    monkeypatch.setattr(cri_route.os, "getuid", lambda: os.stat(stale).st_uid + 1)
    assert remove_stale(str(tmp_path), 600) == []
    assert stale.exists()


def test_a_run_removes_a_stale_directory_and_names_its_own_with_its_pid(tmp_path, monkeypatch):
    """A CRI run against a runtime that answers nothing: before its first call the killed
    run's directory is gone, and its own is gna-workload-<pid>-*, removed at the end."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    stale = aged(tmp_path / f"gna-workload-{dead_pid()}-abc", HOUR)
    seen = []

    class RpcError(Exception):
        def code(self):
            return types.SimpleNamespace(name="UNAVAILABLE")

        def details(self):
            return "no runtime"

    def unavailable(*_a, **_k):
        seen.append(sorted(os.listdir(tmp_path)))
        raise RpcError()

    call = mock.Mock(side_effect=unavailable)
    stub = types.SimpleNamespace(ListPodSandbox=call, ImageStatus=call)
    grpc = types.SimpleNamespace(
        insecure_channel=lambda target: mock.Mock(), RpcError=RpcError,
        StatusCode=types.SimpleNamespace(DEADLINE_EXCEEDED="DEADLINE_EXCEEDED"))
    stubs = types.SimpleNamespace(RuntimeServiceStub=lambda ch: stub,
                                  ImageServiceStub=lambda ch: stub)
    monkeypatch.setattr(cri_route, "_import", lambda: (grpc, mock.MagicMock(), stubs))
    rec = cri_route.CriRoute().run(spec())
    assert rec["failed_step"] == "image"
    assert seen and not stale.exists()
    (own,) = seen[0]
    assert own.startswith(f"gna-workload-{os.getpid()}-")
    assert os.listdir(tmp_path) == []
