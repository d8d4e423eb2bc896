"""Shared pieces of the fault-matrix tests: loopback source addresses, scrapes with a
timeout, an in-process daemon on a fixture tree, resource limits. Nothing here is a test."""
import contextlib
import http.client
import json
import resource
import socket
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, List, Optional, Sequence, Tuple

from agent.cli_run import host_opener
from agent.config import Config
from agent.daemon.parts import Clock
from agent.daemon.sdnotify import Notifier
from agent.daemon.service import Daemon, Generation, Source
from agent.logs import setup
from agent.model import Check, Interval, Severity
from tests.integration.agentproc import BUNDLES

HEALTHY_ROOT = str(BUNDLES / "host-foundation-only" / "root")
PARTIAL = b"GET /metrics HTTP/1.1\r\nHost: agent\r\n"  # a request whose headers never end


def raise_nofile(wanted: int) -> None:
    """Enough descriptors for ``wanted`` sockets in this process (soft limit up to hard)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < wanted:
        target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def loopback(i: int) -> str:
    """127.0.0.2 + i: 127.0.0.0/8 is all loopback on Linux, so each is a distinct client."""
    return socket.inet_ntoa((0x7F000002 + i).to_bytes(4, "big"))


def connect_from(source: str, port: int, timeout: float = 5.0) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", port))
    return sock


def still_open(sock: socket.socket) -> bool:
    """True while the peer has not closed it (a non-blocking peek finds no EOF)."""
    try:
        sock.setblocking(False)
        data = sock.recv(1, socket.MSG_PEEK)
        return bool(data)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        sock.setblocking(True)


def slowloris(port: int, count: int, stop: threading.Event, holders: List[socket.socket]) -> None:
    """Open ``count`` connections to ``port``, each from its own loopback address, appending
    each to ``holders``: half send nothing; half send a partial request, then one header byte
    every 2 s until ``stop`` is set (the slowloris pattern: each recv() gets a byte well inside
    any idle timeout)."""
    for i in range(count):
        sock = connect_from(loopback(i), port)
        if i % 2:
            sock.sendall(PARTIAL)
        holders.append(sock)
    while not stop.wait(2.0):
        for i, sock in enumerate(list(holders)):
            if i % 2:
                with contextlib.suppress(OSError):  # closed by the agent: as designed
                    sock.send(b"X")


def emit_json(result: Any, path: Optional[str]) -> None:
    """For the bench scripts built on these helpers: print the figures as JSON, and write the
    same JSON to ``path`` when one was given (``--json``)."""
    text = json.dumps(result, indent=1)
    print(text)
    if path:
        Path(path).write_text(text + "\n")


def scrape(port: int, timeout: float = 10.0, headers: Optional[dict] = None,
           source: str = "127.0.0.1") -> Tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout,
                                      source_address=(source, 0))
    try:
        conn.request("GET", "/metrics", headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def check(cid: str, fn: Callable[[Any, Any], Any], timeout_s: float = 2.0,
          interval: Interval = Interval.FAST) -> Check:
    return Check(id=cid, title=cid, severity=Severity.CRITICAL, gates=("dra",),
                 interval=interval, remediation="-", run=fn, timeout_s=timeout_s)


def generation(fast: float = 0.2, slow: float = 5.0, extra: Optional[dict] = None) -> Generation:
    data = {"run": {"fast_interval": fast, "slow_interval": slow,
                    "listen_address": "127.0.0.1:0", "exit_on_new_driver": True}}
    data.update(extra or {})
    return Generation(Config.model_validate(data), None, None, "dra", [])


def tree_source(root: str) -> Source:
    """`run --host-root root` as the command line builds it (agent/cli_run.py): a Host on the
    tree each cycle, /proc/devices read from the tree."""
    args = SimpleNamespace(bundle=None, host_root=root)
    return Source(host_opener(args, None, None), root)


class Running:
    """A Daemon serving in a thread (no signal handlers: pytest owns the main thread)."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self.rc: List[int] = []
        self.thread = threading.Thread(target=lambda: self.rc.append(daemon.serve(False)),
                                       name="daemon-under-test", daemon=True)

    def __enter__(self) -> "Running":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.daemon.stop()
        self.thread.join(15)
        assert not self.thread.is_alive(), "the daemon did not stop within 15 s"


def make_daemon(checks: Sequence[Check], root: str = HEALTHY_ROOT, fast: float = 0.2,
                clock: Optional[Clock] = None, xid_monitor: Any = None,
                restart_backoff_s: float = 1.0, daemon_class: Any = Daemon) -> Daemon:
    gen = generation(fast)
    return daemon_class(list(checks), lambda: gen, tree_source(root), "test", setup(),
                        notifier=Notifier({}), clock=clock, xid_monitor=xid_monitor,
                        restart_backoff_s=restart_backoff_s)

