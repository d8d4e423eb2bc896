"""Who gets a connection to the metrics endpoint, and for how long.

At most MAX_PER_ADDRESS connections per client address; beyond MAX_CONNECTIONS in all, the
connection idle the longest without a request in progress is closed to admit the new one, so
a flood from many addresses cannot lock a scraper out. Every connection carries a deadline
(the whole TLS handshake, the whole request once its first byte arrived, the idle time between
keep-alive requests) and the sweep closes those past it: per-recv() timeouts are what the
"slowloris" attack holds open forever (CVE-2007-6750). agent/outputs/metrics_server.py runs
these from its one I/O thread.
"""
import contextlib
import selectors
import socket
import time
from typing import Any, Dict, Optional

# The unit runs with LimitNOFILE=1024 (systemd/gpu-node-agent.service): half of that for
# clients leaves the NVML worker, the kernel log and the API client their descriptors.
MAX_CONNECTIONS = 512
MAX_PER_ADDRESS = 32  # scrapers behind one NAT address, a 20-connection benchmark (bench/)
IDLE_TIMEOUT_S = 30.0
REQUEST_TIMEOUT_S = 10.0  # first byte to last byte of one request
HANDSHAKE_TIMEOUT_S = 10.0
HANDSHAKE, READING, BUSY = "handshake", "reading", "busy"


class Conn:
    __slots__ = ("sock", "addr", "buf", "state", "deadline", "since", "tls", "out", "keep")

    def __init__(self, sock: Any, addr: str, now: float, tls: bool) -> None:
        self.sock = sock
        self.addr = addr
        self.buf = b""
        self.out = b""  # the rest of a response the I/O thread could not send at once
        self.keep = False  # keep the connection after ``out`` is sent
        self.tls = tls
        self.state = HANDSHAKE if tls else READING
        self.since = now  # when it last made progress (for eviction: oldest goes first)
        self.deadline = now + (HANDSHAKE_TIMEOUT_S if tls else IDLE_TIMEOUT_S)


class Admission:
    """The connection table of MetricsServer (its I/O thread alone calls these)."""

    _listener: socket.socket
    _sel: selectors.BaseSelector
    _conns: Dict[Any, Conn]
    _per_addr: Dict[str, int]
    _next_sweep: float
    stats: Dict[str, int]
    web: Optional[Any]

    def _accept(self) -> None:
        for _ in range(64):  # bounded per wake-up so reads are not starved by a connect flood
            try:
                sock, peer = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # EMFILE and friends: try again on the next wake-up
                self.stats["accept_errors"] += 1
                return
            addr = str(peer[0])
            if self._per_addr[addr] >= MAX_PER_ADDRESS:
                self.stats["refused_per_address"] += 1
                sock.close()
                continue
            if len(self._conns) >= MAX_CONNECTIONS and not self._evict_one():
                self.stats["refused_full"] += 1
                sock.close()
                continue
            self._admit(sock, addr)

    def _admit(self, sock: socket.socket, addr: str) -> None:
        now = time.monotonic()
        sock.setblocking(False)
        with contextlib.suppress(OSError):  # small responses: never wait for Nagle
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        web = self.web
        ctx = web.ssl_context if web is not None else None
        if ctx is not None:
            try:
                sock = ctx.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
            except (OSError, ValueError):
                sock.close()
                return
        conn = Conn(sock, addr, now, ctx is not None)
        self._conns[sock] = conn
        self._per_addr[addr] += 1
        self._sel.register(sock, selectors.EVENT_READ, conn)

    def _evict_one(self) -> bool:
        idle = [c for c in self._conns.values() if c.state != BUSY]
        if not idle:
            return False
        self.stats["evicted"] += 1
        self._close(min(idle, key=lambda c: c.since))
        return True

    def _close(self, conn: Conn) -> None:
        if self._conns.pop(conn.sock, None) is not None:
            self._per_addr[conn.addr] -= 1
            if self._per_addr[conn.addr] <= 0:
                del self._per_addr[conn.addr]
        with contextlib.suppress(KeyError, ValueError, OSError, AttributeError):
            self._sel.unregister(conn.sock)
        with contextlib.suppress(OSError):
            conn.sock.close()

    def _sweep(self) -> None:
        now = time.monotonic()
        if now < self._next_sweep:
            return
        self._next_sweep = now + 0.25
        for conn in [c for c in self._conns.values() if c.state != BUSY and now >= c.deadline]:
            self.stats["timed_out"] += 1
            self._close(conn)
