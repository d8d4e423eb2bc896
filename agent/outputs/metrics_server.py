"""The metrics endpoint: serves bytes rendered once per Report; a scrape never computes.

HTTP/1.1 with keep-alive (Prometheus reuses its connection), built so that no client can take
the endpoint away from the others:

- One I/O thread owns every connection (non-blocking sockets, one selector). It reads until a
  *complete* request (request line and headers, and a small body if one is announced) is
  buffered; only then is the connection handed to a worker. A client that sends nothing, or a
  byte every few seconds, costs a file descriptor and a small buffer, never a worker.
- Deadlines are for the whole request, not per recv(): once the first byte of a request has
  arrived, the rest must arrive within REQUEST_TIMEOUT_S; an idle keep-alive connection is
  closed after IDLE_TIMEOUT_S; a TLS handshake must finish within HANDSHAKE_TIMEOUT_S. (The
  "slowloris" attack holds per-recv timeouts open forever: CVE-2007-6750 for Apache httpd;
  Go's http.Server has ReadHeaderTimeout for the same reason.)
- At most MAX_PER_ADDRESS connections per client address; beyond MAX_CONNECTIONS in all, the
  connection idle the longest without a request in progress is closed to admit the new one,
  so a flood from many addresses cannot lock a scraper out either (agent/outputs/http_conns.py).
- Framing and answering one buffered request: agent/outputs/http_wire.py.
- Responses are written by the worker with a deadline for the whole response.
- TLS is per connection and its handshake is non-blocking in the I/O thread, so a slow or
  hostile client cannot stall accept(). The web config (TLS, basic auth) can be swapped at
  runtime (SIGHUP) without rebinding the port; a connection keeps the TLS setting it was
  accepted with.
"""
import collections
import contextlib
import os
import queue
import selectors
import socket
import ssl
import threading
import time
from typing import Any, Deque, Dict, List, Optional, Tuple

from agent.outputs.http_conns import (
    BUSY,
    HANDSHAKE,
    IDLE_TIMEOUT_S,
    READING,
    REQUEST_TIMEOUT_S,
    Admission,
    Conn,
)
from agent.outputs.http_wire import (
    MAX_BODY_BYTES,
    MAX_HEADER_BYTES,
    Payload,
    parse_listen_address,
    request_end,
    respond,
    send_all,
)
from agent.outputs.webconfig import WebConfig

WORKERS = 4  # requests handled at once (a handler only copies cached bytes, or checks a password)
QUEUE_MAX = 64


class MetricsServer(Admission):
    """Bind in the constructor (a bad address is the caller's OSError), serve after start()."""

    def __init__(self, listen: str, web: Optional[WebConfig] = None, body: bytes = b"") -> None:
        host, port = parse_listen_address(listen)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.web = web
        self.payload = Payload(body)
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._listener.bind((host, port))
            self._listener.listen(128)
            self._listener.setblocking(False)
        except OSError:
            self._listener.close()
            raise
        self.server_address = self._listener.getsockname()
        self._conns: Dict[Any, Conn] = {}
        self._per_addr: Dict[str, int] = collections.Counter()
        self._returned: Deque[Tuple[Conn, bool]] = collections.deque()
        self._work: queue.Queue[Optional[Conn]] = queue.Queue(QUEUE_MAX)
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._stopping = threading.Event()
        self._threads: List[threading.Thread] = []
        self._next_sweep = 0.0
        # What the endpoint refused or closed, for the tests and the logs.
        self.stats: Dict[str, int] = collections.Counter()

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def publish(self, body: bytes) -> None:
        self.payload = Payload(body)

    def set_web_config(self, web: Optional[WebConfig]) -> None:
        self.web = web

    def connections(self) -> int:
        return len(self._conns)

    # -- threads ---------------------------------------------------------------------------
    def start(self) -> None:
        self._threads = [threading.Thread(target=self._io_loop, name="http", daemon=True)]
        self._threads += [threading.Thread(target=self._worker, name=f"http-worker-{i}",
                                           daemon=True) for i in range(WORKERS)]
        for t in self._threads:
            t.start()

    def alive(self) -> bool:
        """Every thread still running (the daemon's supervisor restarts the process if not)."""
        return bool(self._threads) and all(t.is_alive() for t in self._threads)

    def stop(self) -> None:
        self._stopping.set()
        self._wake()
        for _ in range(WORKERS):
            with contextlib.suppress(queue.Full):
                self._work.put_nowait(None)
        for t in self._threads:
            t.join(2.0)
        for conn in list(self._conns.values()):
            self._close(conn)
        self._listener.close()
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    def _wake(self) -> None:
        with contextlib.suppress(OSError):  # full pipe: the I/O thread is awake anyway
            os.write(self._wake_w, b"x")

    # -- the I/O thread --------------------------------------------------------------------
    def _io_loop(self) -> None:
        sel = selectors.DefaultSelector()
        self._sel = sel
        sel.register(self._listener, selectors.EVENT_READ, "accept")
        sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        try:
            while not self._stopping.is_set():
                for key, _mask in sel.select(0.25):
                    try:
                        if key.data == "accept":
                            self._accept()
                        elif key.data == "wake":
                            with contextlib.suppress(OSError):
                                os.read(self._wake_r, 4096)
                        else:
                            self._readable(key.data)
                    except Exception:  # one connection's surprise must not end the endpoint
                        self.stats["errors"] += 1
                        if isinstance(key.data, Conn):
                            self._close(key.data)
                try:
                    self._take_back()
                    self._sweep()
                except Exception:
                    self.stats["errors"] += 1
        finally:
            sel.close()

    def _readable(self, conn: Conn) -> None:
        if conn.state == HANDSHAKE:
            try:
                conn.sock.do_handshake()
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                return  # both directions are small here; the read side drives it
            except (OSError, ValueError):  # plain HTTP to a TLS port, bad client cert
                self._close(conn)
                return
            conn.state = READING
            conn.since = time.monotonic()
            conn.deadline = conn.since + IDLE_TIMEOUT_S
        for _ in range(16):  # a TLS socket can hold decrypted bytes beyond one recv
            try:
                data = conn.sock.recv(65536)
            except (BlockingIOError, InterruptedError, ssl.SSLWantReadError,
                    ssl.SSLWantWriteError):
                break
            except (OSError, ValueError):
                self._close(conn)
                return
            if not data:
                self._close(conn)
                return
            if not conn.buf.strip():  # the first byte of a request starts its deadline
                conn.deadline = time.monotonic() + REQUEST_TIMEOUT_S
            conn.buf += data
            if len(conn.buf) > MAX_HEADER_BYTES + MAX_BODY_BYTES:
                break
            if not (conn.tls and conn.sock.pending()):
                break
        self._maybe_dispatch(conn)

    def _maybe_dispatch(self, conn: Conn) -> None:
        conn.buf = conn.buf.lstrip(b"\r\n")  # RFC 9112 2.2: ignore empty lines before a request
        end = request_end(conn.buf)
        if end is None:
            if len(conn.buf) > MAX_HEADER_BYTES:
                self.stats["oversized"] += 1
                self._close(conn)
            return
        head, body = end
        if body > 0 and len(conn.buf) < head + body:
            return  # the announced body is still on its way, under the same deadline
        if self._answer_inline(conn):
            return
        conn.state = BUSY
        conn.since = time.monotonic()
        with contextlib.suppress(KeyError, ValueError):
            self._sel.unregister(conn.sock)
        try:
            self._work.put_nowait(conn)
        except queue.Full:
            self.stats["overloaded"] += 1
            self._close(conn)

    def _answer_inline(self, conn: Conn) -> bool:
        """Plain HTTP without basic auth: the response is cached bytes, so the I/O thread
        answers itself (no thread hand-off per scrape) with one non-blocking send; what the
        socket does not take goes to a worker, which sends it under the write deadline. TLS
        (a retried SSL_write must repeat the same buffer) and basic auth (bcrypt) always go to
        a worker. Returns False when the request is the worker's."""
        web = self.web
        if conn.tls or (web is not None and web.auth_required):
            return False
        for _ in range(8):  # pipelined requests already buffered, bounded per wake-up
            keep, out = respond(conn, self)
            try:
                sent = conn.sock.send(out) if out else 0
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:
                self._close(conn)
                return True
            if sent < len(out):
                conn.out, conn.keep = out[sent:], keep
                return False  # the worker sends the rest
            if not keep:
                self._close(conn)
                return True
            now = time.monotonic()
            conn.since = now
            conn.buf = conn.buf.lstrip(b"\r\n")
            conn.deadline = now + (REQUEST_TIMEOUT_S if conn.buf else IDLE_TIMEOUT_S)
            end = request_end(conn.buf)
            if end is None or (end[1] > 0 and len(conn.buf) < end[0] + end[1]):
                return True
        return True  # more pipelined requests: the next readable event serves them

    def _take_back(self) -> None:
        while self._returned:
            conn, keep = self._returned.popleft()
            if not keep or self._stopping.is_set():
                self._close(conn)
                continue
            now = time.monotonic()
            conn.state = READING
            conn.since = now
            conn.deadline = now + (REQUEST_TIMEOUT_S if conn.buf.strip() else IDLE_TIMEOUT_S)
            try:
                self._sel.register(conn.sock, selectors.EVENT_READ, conn)
            except (OSError, ValueError, KeyError):
                self._close(conn)
                continue
            if conn.tls and conn.sock.pending():  # decrypted bytes the selector cannot see
                self._readable(conn)
            elif conn.buf:  # a pipelined request already buffered
                self._maybe_dispatch(conn)

    # -- the workers -----------------------------------------------------------------------
    def _worker(self) -> None:
        while True:
            conn = self._work.get()
            if conn is None:
                return
            keep = False
            try:
                keep = self._handle(conn)
            except Exception:  # a client that went away mid-response is not the agent's error
                keep = False
            self._returned.append((conn, keep))
            self._wake()

    def _handle(self, conn: Conn) -> bool:
        if conn.out:  # the rest of a response the I/O thread started
            out, conn.out = conn.out, b""
            send_all(conn.sock, out)
            return conn.keep
        keep, out = respond(conn, self)
        if out:
            send_all(conn.sock, out)
        return keep
