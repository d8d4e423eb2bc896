"""The NVML worker's side of a named library (agent/nvml/process.py): what it loads, what it
refuses, and what the client does for snapshots and XID events while the operator's library
is absent or replaced. No gcc needed: the loaded object is a shared library already on this
machine. (The event-stream test changed when XID events moved into the one NVML worker: it
asked a second process, NvmlEventStream, that is gone; the client now starts no worker for
events either.)"""
import _ctypes
import os
import threading
import types
from typing import Any, Dict, List, Optional

from agent.nvml.client import NvmlClient
from agent.nvml.process import LIBRARY_ENV, LibraryChoice, LibraryPin, load_into, worker_env
from checks.nvml_responsive import NVML_RESPONSIVE
from checks.policy import ResolvedPolicy, load_policy


def fake_pynvml():
    return types.SimpleNamespace(nvmlLib=None, libLoadLock=threading.Lock())


def failed(nvml: Any, path: Optional[str]) -> Dict[str, Any]:
    err = load_into(nvml, path)
    assert err is not None
    return err


def a_shared_object() -> str:
    """A real ELF shared object on this machine, by its real path (ctypes' own extension)."""
    return os.path.realpath(_ctypes.__file__)


def test_the_named_file_becomes_pynvmls_library():
    nvml = fake_pynvml()
    path = a_shared_object()
    assert load_into(nvml, path) is None
    assert nvml.nvmlLib is not None and nvml.nvmlLib._name == path


def test_no_path_leaves_pynvml_to_its_soname():
    nvml = fake_pynvml()
    assert load_into(nvml, None) is None and nvml.nvmlLib is None


def test_a_relative_path_a_missing_file_and_a_non_library_are_errors_naming_the_path(tmp_path):
    nvml = fake_pynvml()
    assert failed(nvml, "usr/lib64/libnvidia-ml.so.1")["kind"] == "library_load_failed"
    missing = failed(nvml, str(tmp_path / "libnvidia-ml.so.1"))
    assert missing["kind"] == "library_not_found"
    assert str(tmp_path / "libnvidia-ml.so.1") in missing["message"]
    text = tmp_path / "libnvidia-ml.so.1"
    text.write_text("not an ELF object\n")
    bad = failed(nvml, str(text))
    assert bad["kind"] == "library_load_failed" and str(text) in bad["message"]
    assert nvml.nvmlLib is None  # pynvml is never handed a library that did not load


def test_a_path_that_became_a_symlink_is_not_followed(tmp_path):
    nvml = fake_pynvml()
    os.symlink(a_shared_object(), tmp_path / "libnvidia-ml.so.1")
    err = failed(nvml, str(tmp_path / "libnvidia-ml.so.1"))
    assert err["kind"] == "library_load_failed" and "symlink" in err["message"]
    assert nvml.nvmlLib is None


def test_the_worker_environment_names_the_library_or_nothing():
    inherited = {"PATH": "/usr/bin", LIBRARY_ENV: "/stale/libnvidia-ml.so.1"}
    assert LIBRARY_ENV not in worker_env(inherited, None)
    env = worker_env(inherited, "/run/nvidia/driver/usr/lib64/libnvidia-ml.so.1")
    assert env[LIBRARY_ENV] == "/run/nvidia/driver/usr/lib64/libnvidia-ml.so.1"
    assert env["PATH"] == "/usr/bin" and "LD_LIBRARY_PATH" not in env


def not_there():
    return LibraryChoice(None, "libnvidia-ml.so.1 not found under the GPU Operator driver "
                               "root /run/nvidia/driver")


def test_no_worker_starts_without_the_library_and_nvml_responsive_fails_naming_the_root():
    client = NvmlClient(library=not_there)
    snap = client.snapshot()
    client.close()
    assert client.stats["spawns"] == 0
    assert snap["error"]["kind"] == "library_not_found"
    host = types.SimpleNamespace(gpus=lambda: snap)
    policy = ResolvedPolicy(load_policy(2), "operator-clusterpolicy")
    outcome = NVML_RESPONSIVE.run(host, policy)
    assert outcome.status.value == "fail" and outcome.code == "library-not-found"
    assert "/run/nvidia/driver" in outcome.summary


def test_a_replaced_or_vanished_file_stops_the_running_worker(tmp_path):
    lib = tmp_path / "libnvidia-ml.so.1"
    lib.write_bytes(b"first")
    now = {"choice": LibraryChoice(str(lib), "found")}
    pin = LibraryPin(lambda: now["choice"])
    stops = []
    assert pin.ask(False, lambda: stops.append(1)) is None
    assert pin.env({})[LIBRARY_ENV] == str(lib)
    assert pin.ask(True, lambda: stops.append(1)) is None and stops == []  # same file: kept
    replacement = tmp_path / "new"
    replacement.write_bytes(b"second, longer")
    os.replace(replacement, lib)  # a new inode at the same path: an upgraded driver
    assert pin.ask(True, lambda: stops.append(1)) is None and stops == [1]
    pin.env({})
    now["choice"] = LibraryChoice(None, "gone")
    assert pin.ask(True, lambda: stops.append(2)) == "gone" and stops == [1, 2]


def test_a_lookup_that_raises_is_a_reason_not_a_crash():
    def broken():
        raise RuntimeError("boom")

    assert "boom" in str(LibraryPin(broken).ask(False, lambda: None))


def test_xid_events_start_no_worker_without_the_library():
    seen: List[Any] = []
    client = NvmlClient(library=not_there)
    client.watch_xid(seen.append)
    snap = client.snapshot()
    client.close()
    assert client.stats["spawns"] == 0 and client.worker_pid is None and seen == []
    assert snap["error"]["kind"] == "library_not_found"
    assert "/run/nvidia/driver" in snap["error"]["message"]


def test_a_library_that_would_not_load_is_a_failure_naming_the_path():
    path = "/run/nvidia/driver/usr/lib64/libnvidia-ml.so.1"
    snap = {"schema_version": 1, "source": "nvml", "captured_at": "2026-01-01T00:00:00Z",
            "gpus": [], "error": {"kind": "library_load_failed", "nvml_code": None,
                                  "message": f"cannot load NVML library {path}: invalid ELF"}}
    host = types.SimpleNamespace(gpus=lambda: snap)
    outcome = NVML_RESPONSIVE.run(host, ResolvedPolicy(load_policy(1), "operator-clusterpolicy"))
    assert outcome.status.value == "fail" and outcome.code == "nvml-failed"
    assert path in outcome.summary
