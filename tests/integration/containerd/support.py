"""Real containerd for the integration tests: finding the binaries, a fixture tree rewritten to
live under a temp dir, a locally built image (no registry is reachable), and a daemon in a
temp root with its own socket, stopped by PID with bounded waits."""
import contextlib
import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import tarfile
import time
from pathlib import Path
from typing import List, Optional, Sequence

from agent.hostview import CommandResult
from agent.safeio.commands import SubprocessCommands
from tests.components import component, missing


def binary_version(path: str) -> Optional[str]:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def containerd(series: str) -> str:
    """Debian's containerd of one series, unpacked by .ci/setup.d/30-containerd.sh: "1.6"
    (bookworm), "1.7" (trixie) or "2.1" (forky); skips (fails under GNA_REQUIRE_COMPONENTS=1)
    when it is missing or answers `--version` with another series."""
    path = component(f"containerd-{series}")
    version = binary_version(path) or ""
    # `containerd --version`: "containerd github.com/containerd/containerd[/v2] 2.1.9+unknown ..."
    if f" {series}." not in version:
        missing(f"containerd-{series}", f"{path} is not containerd {series}: {version.strip()!r}")
    return path


def containerd_16() -> str:
    return containerd("1.6")


def containerd_17() -> str:
    return containerd("1.7")


def containerd_21() -> str:
    return containerd("2.1")


def runtime_path(binary: str) -> str:
    """PATH for a containerd daemon and the checks that run `containerd`: its own directory
    first (its shims and ctr), then runc's, then the caller's."""
    runc = component("runc")
    return os.pathsep.join([str(Path(binary).parent), str(Path(runc).parent),
                            os.environ.get("PATH", "/usr/bin:/bin")])


def rewrite_tree(bundle_root: Path, dest: Path) -> Path:
    """Copy a bundle's root/ to dest, making every absolute /etc/containerd/ and /usr/bin/ path
    in its TOML files point inside dest, so a real containerd reads the same files."""
    shutil.copytree(bundle_root, dest, symlinks=True)
    for toml in dest.rglob("*.toml"):
        text = toml.read_text()
        for prefix in ("/etc/containerd/", "/usr/bin/"):
            text = text.replace(f'"{prefix}', f'"{dest}{prefix}')
        toml.write_text(text)
    return dest


class BinaryAs:
    """Answers the argv lists the checks run with a real containerd binary (argv[0] swapped),
    and maps the temp prefix out of its output so paths read as the check's own."""

    def __init__(self, binary: str, prefix: str = "") -> None:
        self.binary, self.prefix, self.real = binary, prefix, SubprocessCommands()

    def run(self, argv: Sequence[str], timeout: float) -> CommandResult:
        if list(argv[:1]) != ["containerd"]:
            return CommandResult(tuple(argv), 127, "", "not installed")
        res = self.real.run([self.binary, *argv[1:]], timeout)
        return CommandResult(tuple(argv), res.rc, res.stdout, res.stderr, res.timed_out)


def image_tar(out: Path, name: str, busybox: Optional[str] = None) -> Path:
    """A docker-archive image with a static busybox whose entrypoint sleeps (a pause image)."""
    busybox = busybox or component("busybox")
    layer_buf = io.BytesIO()
    with tarfile.open(fileobj=layer_buf, mode="w") as layer:
        for d in ("bin", "proc", "sys", "dev", "etc", "tmp"):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            layer.addfile(info)
        data = Path(busybox).read_bytes()
        info = tarfile.TarInfo("bin/busybox")
        info.size, info.mode = len(data), 0o755
        layer.addfile(info, io.BytesIO(data))
        for link in ("sh", "sleep"):
            info = tarfile.TarInfo(f"bin/{link}")
            info.type, info.linkname = tarfile.SYMTYPE, "busybox"
            layer.addfile(info)
    blob = layer_buf.getvalue()
    config = {"architecture": "amd64", "os": "linux",
              "config": {"Entrypoint": ["/bin/sleep"], "Cmd": ["3600"], "Env": ["PATH=/bin"]},
              "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(blob).hexdigest()]}}
    manifest = [{"Config": "config.json", "RepoTags": [name], "Layers": ["layer.tar"]}]
    with tarfile.open(out, "w") as tar:
        for fname, payload in (("layer.tar", blob), ("config.json", json.dumps(config).encode()),
                               ("manifest.json", json.dumps(manifest).encode())):
            info = tarfile.TarInfo(fname)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    return out


class Daemon:
    """containerd in a temp root with its own socket; stop() ends it and its shims by PID."""

    def __init__(self, binary: str, config: Path, workdir: Path) -> None:
        self.binary, self.config, self.workdir = binary, config, workdir
        self.socket = workdir / "containerd.sock"
        self.log = workdir / "containerd.log"
        self.proc: Optional[subprocess.Popen] = None

    def start(self, timeout: float = 20.0) -> None:
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen([self.binary, "--config", str(self.config)],
                                         stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True,
                                         env={**os.environ, "PATH": runtime_path(self.binary)})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"containerd exited {self.proc.returncode}: {self.log_tail()}")
            if self.socket.exists() and b"containerd successfully booted" in self.log.read_bytes():
                return
            time.sleep(0.1)
        raise RuntimeError(f"containerd did not come up in {timeout}s: {self.log_tail()}")

    def ctr(self, *args: str, timeout: float = 60.0,
            namespace: str = "k8s.io") -> subprocess.CompletedProcess:
        ctr = str(Path(self.binary).with_name("ctr"))
        return subprocess.run([ctr, "--address", str(self.socket), "-n", namespace, *args],
                              capture_output=True, text=True, timeout=timeout)

    def log_tail(self, n: int = 2000) -> str:
        return self.log.read_bytes()[-n:].decode("utf-8", "replace") if self.log.exists() else ""

    def _shim_pids(self) -> List[int]:
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmd = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if cmd and cmd[0].endswith(b"containerd-shim-runc-v2") and str(self.socket).encode() in b" ".join(cmd):
                pids.append(int(entry.name))
        return pids

    def stop(self, timeout: float = 10.0) -> None:
        shims = self._shim_pids()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=timeout)
        for pid in shims + self._shim_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

