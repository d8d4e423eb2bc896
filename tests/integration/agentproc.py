"""Start and stop real processes for the run/Prometheus tests and the bench: the agent
(`gpu-node-agent run`), Prometheus and node_exporter, each on a loopback port, stopped by PID
with bounded waits. Nothing here is a test; test modules and bench/ import it."""
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from tests.components import component

REPO = Path(__file__).resolve().parents[2]
BUNDLES = REPO / "tests" / "fixtures" / "bundles"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def descendants(pid: int) -> Dict[int, str]:
    """Every process below ``pid`` with its command line (psutil walks /proc's ppid links); a
    process that exits between the listing and the read is left out."""
    import psutil

    found: Dict[int, str] = {}
    try:
        kids = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return found
    for kid in kids:
        try:
            found[kid.pid] = " ".join(kid.cmdline())
        except psutil.Error:
            continue
    return found


def agent_argv() -> List[str]:
    """The entry point of the interpreter running the tests (its venv's bin/), never some
    other install that happens to be first on PATH."""
    beside = Path(sys.executable).parent / "gpu-node-agent"
    if beside.is_file() and os.access(beside, os.X_OK):
        return [str(beside)]
    return [sys.executable, "-m", "agent.cli"]


def wait_for(predicate: Any, timeout: float, what: str, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
        except (OSError, ValueError, KeyError):
            last = None
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class Proc:
    """A child process with its stderr in a file; stopped by PID, bounded."""

    def __init__(self, argv: Sequence[str], log: Path, env: Optional[Dict[str, str]] = None,
                 cwd: Optional[Path] = None) -> None:
        self.log = log
        self._fh = open(log, "wb")  # noqa: SIM115  (closed in stop())
        self.popen = subprocess.Popen(list(argv), stdout=self._fh, stderr=subprocess.STDOUT,
                                      env=env, cwd=str(cwd or REPO))
        self.pid = self.popen.pid

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def signal(self, sig: int) -> None:
        if self.popen.poll() is None:
            os.kill(self.pid, sig)

    def wait(self, timeout: float) -> Optional[int]:
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, timeout: float = 10.0) -> Optional[int]:
        rc = self.popen.poll()
        if rc is None:
            os.kill(self.pid, signal.SIGTERM)
            rc = self.wait(timeout)
            if rc is None:
                os.kill(self.pid, signal.SIGKILL)
                rc = self.wait(5)
        self._fh.close()
        return rc


def http_get(url: str, timeout: float = 5.0, headers: Optional[Dict[str, str]] = None,
             context: Any = None) -> bytes:
    req = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(req, timeout=timeout, context=context) as resp:  # noqa: S310
        return bytes(resp.read())


def start_agent(tmp: Path, args: Sequence[str], config: str = "", port: Optional[int] = None,
                env: Optional[Dict[str, str]] = None, name: str = "agent",
                wait_ready: bool = True) -> "tuple[Proc, int]":
    """`gpu-node-agent run ARGS` on 127.0.0.1:PORT with CONFIG (YAML text) as its config."""
    port = port or free_port()
    cfg = tmp / f"{name}.yaml"
    cfg.write_text(config)
    argv = agent_argv() + ["run", "--config", str(cfg),
                           "--listen-address", f"127.0.0.1:{port}", *args]
    proc = Proc(argv, tmp / f"{name}.log", env=env)
    if wait_ready:
        try:
            wait_for(lambda: "first full run done" in proc.text() or proc.popen.poll() is not None,
                     60, "the agent's first run")
            assert proc.popen.poll() is None, f"agent exited: {proc.text()[-2000:]}"
        except BaseException:
            proc.stop()
            raise
    return proc, port


class Prometheus:
    """Debian's prometheus binary with its own storage in a temp dir, on loopback."""

    def __init__(self, tmp: Path, scrape_configs: List[Dict[str, Any]],
                 rule_files: Sequence[Path] = ()) -> None:
        import yaml

        self.port = free_port()
        cfg = tmp / "prometheus.yml"
        doc: Dict[str, Any] = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s",
                       "evaluation_interval": "1s"},
            "scrape_configs": scrape_configs,
        }
        if rule_files:
            doc["rule_files"] = [str(f) for f in rule_files]
        cfg.write_text(yaml.safe_dump(doc))
        self.proc = Proc([
            component("prometheus"), f"--config.file={cfg}",
            f"--storage.tsdb.path={tmp / 'tsdb'}", f"--web.listen-address=127.0.0.1:{self.port}",
            "--storage.tsdb.retention.time=1h", "--log.level=warn",
        ], tmp / "prometheus.log", cwd=tmp)
        self.base = f"http://127.0.0.1:{self.port}"
        try:
            wait_for(lambda: http_get(self.base + "/-/ready", 2).startswith(b"Prometheus"),
                     60, "Prometheus ready")
        except BaseException:
            self.proc.stop()
            raise

    def query(self, expr: str) -> List[Dict[str, Any]]:
        url = self.base + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        doc = json.loads(http_get(url))
        assert doc["status"] == "success", doc
        return list(doc["data"]["result"])

    def wait_query(self, expr: str, timeout: float = 30.0) -> List[Dict[str, Any]]:
        return list(wait_for(lambda: self.query(expr), timeout, f"a result for {expr}", 0.5))

    def targets(self) -> List[Dict[str, Any]]:
        doc = json.loads(http_get(self.base + "/api/v1/targets"))
        return list(doc["data"]["activeTargets"])

    def stop(self) -> Optional[int]:
        return self.proc.stop()
