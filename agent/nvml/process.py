"""The one NVML worker child process, as the client (agent/nvml/client.py) runs it.

How it is started (``python -m agent.nvml.worker`` from this installation), how its JSON
lines are capped, and how its request pipe and stderr are closed and read after it ended.
What to do about a worker that is late or gone (kill by PID, backoff, "stuck") is the one
supervisor's: agent/nvml/client.py; its replies and XID events are read by
agent/nvml/channel.py.

Which libnvidia-ml the NVML worker loads: the host's loader path (pynvml's own
``CDLL("libnvidia-ml.so.1")``), or one exact file named by the agent, the GPU Operator's
driver root's copy (agent/host/driver_root.py finds it).

The client names the file in the worker's environment (LIBRARY_ENV, an absolute path); the
worker calls ``load_into(pynvml, path)`` before pynvml's first call. It loads that file with
``ctypes.CDLL(path)`` and hands the same object to pynvml as its ``nvmlLib``, under pynvml's
``libLoadLock``: pynvml's ``_LoadNvmlLibrary`` (nvidia-ml-py 13.615.71, pynvml.py) only
dlopens the soname while ``nvmlLib`` is None, so every later NVML call resolves its function
in exactly that file. Preloading alone would also work for NVIDIA's real library, because
glibc's dlopen matches an already-loaded object by its DT_SONAME (libnvidia-ml.so.1), but not
for a library without one (the test suite's simulated library has none: measured, dlopen of
the soname then fails), so the handle is set, and preloading is only the fallback for a pynvml
without ``nvmlLib``. LD_LIBRARY_PATH is never used for this: it would also take the driver
root's libc and every other library of the interpreter from that root.

This module never imports pynvml: the agent's process imports it (the client), and only the
worker hands pynvml in.
"""
import os
import signal
from typing import (
    IO,
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Mapping,
    NamedTuple,
    Optional,
    Sequence,
    Tuple,
    Union,
)

if TYPE_CHECKING:
    import subprocess

WORKER_MODULE = "agent.nvml.worker"
MAX_LINE_BYTES = 64 * 1024 * 1024  # a reply past this is dropped, not buffered on


def package_parent() -> str:
    """The directory holding the ``agent`` package (the checkout, or site-packages), so
    ``-m agent.nvml.worker`` resolves to this very installation whatever the caller's working
    directory. (This file is agent/nvml/process.py: three levels below it.)"""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def spawn_worker(
    python: str,
    args: Sequence[str] = (),
    env: Optional[Mapping[str, str]] = None,
    stderr: Any = None,
) -> "subprocess.Popen[bytes]":
    """Start ``python -m agent.nvml.worker [args]`` with pipes on stdin and stdout; stderr to
    ``stderr`` (a file), or /dev/null when None."""
    # Imported here: the worker imports this module for its constants and load_into, and
    # subprocess (selectors, threading's peers) was 0.8 MiB of its RSS (bench_nvml_processes).
    import subprocess

    return subprocess.Popen(
        [python, "-m", WORKER_MODULE, *args],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL if stderr is None else stderr,
        env=dict(os.environ if env is None else env), close_fds=True, cwd=package_parent(),
    )


def close_stdin(proc: "subprocess.Popen[bytes]") -> None:
    """The request pipe. (Its stdout is the reader thread's to close: agent/nvml/channel.py.)"""
    try:
        if proc.stdin is not None:
            proc.stdin.close()
    except OSError:
        pass


def stderr_tail(stderr: Optional[IO[bytes]]) -> str:
    """The last line the worker wrote on stderr (a crash's reason), at most 300 characters."""
    if stderr is None:
        return ""
    try:
        stderr.seek(0)
        lines = stderr.read()[-4096:].decode("utf-8", "replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


# -- which libnvidia-ml the worker loads ---------------------------------------------
LIBRARY_ENV = "GNA_NVML_LIBRARY"  # the absolute path the worker loads instead of the soname
# The maintenance flag file (config gpu.maintenance_flag): the worker checks it between event
# waits and exits when it appears (agent/nvml/worker.py serve).
MAINTENANCE_FLAG_ENV = "GNA_NVML_MAINTENANCE_FLAG"
# Sent by the agent after each request to a worker that waits for XID events: it cuts the
# bounded nvmlEventSetWait_v2 short, which nvml.h says "can return before specified timeout
# passes (e.g. when interrupt arrives)". SIGURG because its default action is to ignore it
# (signal(7)): one that reaches a worker before its handler exists does nothing.
NUDGE_SIGNAL = signal.SIGURG


class LibraryChoice(NamedTuple):
    """The file to load (None: not found, the worker is not started) and why."""

    path: Optional[str]
    reason: str


# What the clients accept: None (the host's loader path), a fixed absolute path, or a
# callable asked again before each start (a driver root that fills in later).
LibrarySpec = Union[None, str, Callable[[], Optional[LibraryChoice]]]


def current_choice(spec: LibrarySpec) -> Optional[LibraryChoice]:
    """The spec asked now; None = the host's own loader path."""
    if spec is None:
        return None
    if isinstance(spec, str):
        return LibraryChoice(spec, f"configured library {spec}")
    try:
        return spec()
    except Exception as exc:  # the client's snapshot never raises: say why instead
        return LibraryChoice(None, f"looking for the NVML library failed: {exc!r}")


def identity(path: str) -> Optional[Tuple[int, int, int, int]]:
    """What tells a replaced file from the one a worker loaded (device, inode, mtime, size)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


def worker_env(base: Mapping[str, str], path: Optional[str]) -> Dict[str, str]:
    """The worker's environment: LIBRARY_ENV set to ``path``, or removed (the host's loader
    path) so a value inherited from the agent's own environment never picks a library."""
    env = {k: v for k, v in base.items() if k != LIBRARY_ENV}
    if path is not None:
        env[LIBRARY_ENV] = path
    return env


class LibraryPin:
    """What a client's workers load, asked again before each snapshot: the file the next
    worker loads (``want``: path and identity) and the one the running worker loaded."""

    def __init__(self, spec: LibrarySpec) -> None:
        self.spec = spec
        self.want: Tuple[Optional[str], Any] = (None, None)
        self.loaded: Tuple[Optional[str], Any] = (None, None)

    def ask(self, running: bool, stop: Callable[[], None]) -> Optional[str]:
        """Why the library is missing (None: it is there). ``stop`` ends a running worker
        whose file is gone or was replaced (the operator's driver upgraded): no NVML handle
        stays open on it, and the next worker loads the new file."""
        if self.spec is None:
            return None
        choice = current_choice(self.spec)
        path = None if choice is None else choice.path
        self.want = (path, identity(path) if path else None)
        if running and (self.want != self.loaded or (choice is not None and path is None)):
            stop()
        return choice.reason if choice is not None and path is None else None

    def env(self, base: Mapping[str, str]) -> Dict[str, str]:
        """The environment of a worker started now (it loads ``want``)."""
        self.loaded = self.want
        return worker_env(base, self.want[0])


def import_pynvml() -> Any:
    """``import pynvml`` for the worker, without ``ctypes.util``'s imports.

    pynvml.py (nvidia-ml-py 13.615.71, line 33) does ``from ctypes.util import find_library``
    and never calls it; ctypes/util.py imports shutil and subprocess at its top (bz2, lzma,
    tempfile, selectors with them): 2.0 MiB of the worker's RSS, measured with
    bench/bench_nvml_processes.py. So while pynvml loads, ``ctypes.util`` is a module whose
    ``find_library`` imports the real one when called, and is then taken out of sys.modules
    (a later ``import ctypes.util`` gets the real module). Where either is already loaded (a
    test importing the worker in-process) it is a plain import.
    """
    import sys

    if "pynvml" in sys.modules or "ctypes.util" in sys.modules:
        import pynvml

        return pynvml

    def find_library(name: str) -> Optional[str]:
        from ctypes import util

        return util.find_library(name)

    stub = type(sys)("ctypes.util")
    stub.find_library = find_library  # type: ignore[attr-defined]
    sys.modules["ctypes.util"] = stub
    try:
        import pynvml
    finally:
        if sys.modules.get("ctypes.util") is stub:
            del sys.modules["ctypes.util"]
    return pynvml


def error(kind: str, message: str) -> Dict[str, Any]:
    return {"kind": kind, "nvml_code": None, "message": message}


def load_into(pynvml: Any, path: Optional[str]) -> Optional[Dict[str, Any]]:
    """Load ``path`` as pynvml's library (None: leave pynvml to its soname). Returns None when
    loaded, else the snapshot error record (docs/gpu-snapshot.md) that names the path."""
    if path is None:
        return None
    if not os.path.isabs(path):
        return error("library_load_failed", f"NVML library path {path!r} is not absolute")
    if not os.path.isfile(path):
        return error("library_not_found", f"NVML library {path} does not exist")
    # The agent resolved this path inside the driver root with no symlink left in it; one
    # that appeared since could point outside the root, so it is not followed.
    if os.path.realpath(path) != path:
        return error("library_load_failed",
                     f"NVML library {path} is not its own real path (a symlink appeared)")
    import ctypes  # here, not at import: `ctypes` dlopens the interpreter itself on import

    try:
        lib = ctypes.CDLL(path)
    except OSError as exc:
        return error("library_load_failed", f"cannot load NVML library {path}: {exc}")
    lock = getattr(pynvml, "libLoadLock", None)
    if hasattr(pynvml, "nvmlLib"):
        if lock is not None:
            with lock:
                pynvml.nvmlLib = lib
        else:
            pynvml.nvmlLib = lib
    return None
