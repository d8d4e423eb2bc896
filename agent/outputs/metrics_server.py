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
  so a flood from many addresses cannot lock a scraper out either.
- Responses are written by the worker with a deadline for the whole response.
- TLS is per connection and its handshake is non-blocking in the I/O thread, so a slow or
  hostile client cannot stall accept(). The web config (TLS, basic auth) can be swapped at
  runtime (SIGHUP) without rebinding the port; a connection keeps the TLS setting it was
  accepted with.
"""
import collections
import contextlib
import gzip
import io
import os
import queue
import selectors
import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler
from typing import Any, Deque, Dict, List, Optional, Tuple

from agent.outputs.webconfig import AUTH_LIMITED, AUTH_OK, WebConfig

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# The unit runs with LimitNOFILE=1024 (systemd/gpu-node-agent.service): half of that for
# clients leaves the NVML worker, the kernel log and the API client their descriptors.
MAX_CONNECTIONS = 512
MAX_PER_ADDRESS = 32  # scrapers behind one NAT address, a 20-connection benchmark (bench/)
WORKERS = 4  # requests handled at once (a handler only copies cached bytes, or checks a password)
QUEUE_MAX = 64
IDLE_TIMEOUT_S = 30.0
REQUEST_TIMEOUT_S = 10.0  # first byte to last byte of one request
HANDSHAKE_TIMEOUT_S = 10.0
WRITE_TIMEOUT_S = 10.0
MAX_HEADER_BYTES = 16 * 1024
MAX_BODY_BYTES = 4 * 1024  # GET/HEAD carry none; a small one is read and ignored
LANDING = (
    b"<html><head><title>gpu-node-agent</title></head><body><h1>gpu-node-agent</h1>"
    b'<p><a href="/metrics">Metrics</a></p></body></html>\n'
)
_HANDSHAKE, _READING, _BUSY = "handshake", "reading", "busy"


def parse_listen_address(text: str) -> Tuple[str, int]:
    """"host:port", "[v6]:port" or ":port" (all interfaces, as node_exporter takes it)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"listen address {text!r}: expected host:port")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


class _Payload:
    """The current exposition, plain and gzipped, swapped atomically (one reference)."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.gz = gzip.compress(body, compresslevel=6, mtime=0)


class _Conn:
    __slots__ = ("sock", "addr", "buf", "state", "deadline", "since", "tls", "out", "keep")

    def __init__(self, sock: Any, addr: str, now: float, tls: bool) -> None:
        self.sock = sock
        self.addr = addr
        self.buf = b""
        self.out = b""  # the rest of a response the I/O thread could not send at once
        self.keep = False  # keep the connection after ``out`` is sent
        self.tls = tls
        self.state = _HANDSHAKE if tls else _READING
        self.since = now  # when it last made progress (for eviction: oldest goes first)
        self.deadline = now + (HANDSHAKE_TIMEOUT_S if tls else IDLE_TIMEOUT_S)


def _request_end(buf: bytes) -> Optional[Tuple[int, int]]:
    """(end of the headers, body length) once the headers are complete; None before. A body
    length of -1 means one we will not read (chunked, or over MAX_BODY_BYTES)."""
    end = buf.find(b"\r\n\r\n")
    sep = 4
    bare = buf.find(b"\n\n")  # http.server accepts bare LF line ends too
    if bare != -1 and (end == -1 or bare < end):
        end, sep = bare, 2
    if end == -1:
        return None
    head = buf[:end].lower()
    body = 0
    for line in head.split(b"\n")[1:]:
        name, _, value = line.partition(b":")
        name, value = name.strip(), value.strip()
        if name == b"transfer-encoding":
            body = -1
        elif name == b"content-length" and body != -1:
            body = int(value) if value.isdigit() and int(value) <= MAX_BODY_BYTES else -1
    return end + sep, body


class _Handler(BaseHTTPRequestHandler):
    """One request, parsed from the bytes the I/O thread buffered; the response goes to a
    buffer that the worker then writes with a deadline."""

    protocol_version = "HTTP/1.1"
    server: "MetricsServer"  # type: ignore[assignment]

    def __init__(self, raw: bytes, client: Tuple[str, int], server: "MetricsServer") -> None:
        # BaseRequestHandler.__init__ would read from the socket; everything is buffered.
        self.rfile = io.BytesIO(raw)
        self.wfile = io.BytesIO()
        self.client_address = client
        self.server = server
        self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass  # one log line per scrape would flood the journal

    def _send(self, code: int, body: bytes, ctype: str, extra: Optional[dict] = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        for key, value in self.server.web.headers.items() if self.server.web else ():
            self.send_header(key, value)
        self._headers_buffer.append(b"\r\n")  # type: ignore[attr-defined]
        if self.command != "HEAD":
            self._headers_buffer.append(body)  # type: ignore[attr-defined]
        self.flush_headers()

    def do_GET(self) -> None:  # noqa: N802
        web = self.server.web
        if web is not None:
            verdict = web.authorize(self.headers.get("Authorization"), self.client_address[0])
            if verdict == AUTH_LIMITED:  # RFC 6585 section 4
                self._send(429, b"Too Many Requests\n", "text/plain; charset=utf-8",
                           {"Retry-After": "5"})
                return
            if verdict != AUTH_OK:
                self._send(401, b"Unauthorized\n", "text/plain; charset=utf-8",
                           {"WWW-Authenticate": 'Basic realm="gpu-node-agent"'})
                return
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            payload = self.server.payload
            if "gzip" in (self.headers.get("Accept-Encoding") or ""):
                self._send(200, payload.gz, CONTENT_TYPE, {"Content-Encoding": "gzip"})
            else:
                self._send(200, payload.body, CONTENT_TYPE)
        elif path == "/":
            self._send(200, LANDING, "text/html; charset=utf-8")
        elif path in ("/-/healthy", "/healthz"):
            self._send(200, b"OK\n", "text/plain; charset=utf-8")
        else:
            self._send(404, b"Not Found\n", "text/plain; charset=utf-8")

    do_HEAD = do_GET


class MetricsServer:
    """Bind in the constructor (a bad address is the caller's OSError), serve after start()."""

    def __init__(self, listen: str, web: Optional[WebConfig] = None, body: bytes = b"") -> None:
        host, port = parse_listen_address(listen)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.web = web
        self.payload = _Payload(body)
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
        self._conns: Dict[Any, _Conn] = {}
        self._per_addr: Dict[str, int] = collections.Counter()
        self._returned: Deque[Tuple[_Conn, bool]] = collections.deque()
        self._work: queue.Queue[Optional[_Conn]] = queue.Queue(QUEUE_MAX)
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
        self.payload = _Payload(body)

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
                        if isinstance(key.data, _Conn):
                            self._close(key.data)
                try:
                    self._take_back()
                    self._sweep()
                except Exception:
                    self.stats["errors"] += 1
        finally:
            sel.close()

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
        conn = _Conn(sock, addr, now, ctx is not None)
        self._conns[sock] = conn
        self._per_addr[addr] += 1
        self._sel.register(sock, selectors.EVENT_READ, conn)

    def _evict_one(self) -> bool:
        idle = [c for c in self._conns.values() if c.state != _BUSY]
        if not idle:
            return False
        self.stats["evicted"] += 1
        self._close(min(idle, key=lambda c: c.since))
        return True

    def _close(self, conn: _Conn) -> None:
        if self._conns.pop(conn.sock, None) is not None:
            self._per_addr[conn.addr] -= 1
            if self._per_addr[conn.addr] <= 0:
                del self._per_addr[conn.addr]
        with contextlib.suppress(KeyError, ValueError, OSError, AttributeError):
            self._sel.unregister(conn.sock)
        with contextlib.suppress(OSError):
            conn.sock.close()

    def _readable(self, conn: _Conn) -> None:
        if conn.state == _HANDSHAKE:
            try:
                conn.sock.do_handshake()
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                return  # both directions are small here; the read side drives it
            except (OSError, ValueError):  # plain HTTP to a TLS port, bad client cert
                self._close(conn)
                return
            conn.state = _READING
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

    def _maybe_dispatch(self, conn: _Conn) -> None:
        conn.buf = conn.buf.lstrip(b"\r\n")  # RFC 9112 2.2: ignore empty lines before a request
        end = _request_end(conn.buf)
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
        conn.state = _BUSY
        conn.since = time.monotonic()
        with contextlib.suppress(KeyError, ValueError):
            self._sel.unregister(conn.sock)
        try:
            self._work.put_nowait(conn)
        except queue.Full:
            self.stats["overloaded"] += 1
            self._close(conn)

    def _answer_inline(self, conn: _Conn) -> bool:
        """Plain HTTP without basic auth: the response is cached bytes, so the I/O thread
        answers itself (no thread hand-off per scrape) with one non-blocking send; what the
        socket does not take goes to a worker, which sends it under the write deadline. TLS
        (a retried SSL_write must repeat the same buffer) and basic auth (bcrypt) always go to
        a worker. Returns False when the request is the worker's."""
        web = self.web
        if conn.tls or (web is not None and web.auth_required):
            return False
        for _ in range(8):  # pipelined requests already buffered, bounded per wake-up
            keep, out = self._respond(conn)
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
            end = _request_end(conn.buf)
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
            conn.state = _READING
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

    def _sweep(self) -> None:
        now = time.monotonic()
        if now < self._next_sweep:
            return
        self._next_sweep = now + 0.25
        for conn in [c for c in self._conns.values() if c.state != _BUSY and now >= c.deadline]:
            self.stats["timed_out"] += 1
            self._close(conn)

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

    def _handle(self, conn: _Conn) -> bool:
        if conn.out:  # the rest of a response the I/O thread started
            out, conn.out = conn.out, b""
            self._send_all(conn.sock, out)
            return conn.keep
        keep, out = self._respond(conn)
        if out:
            self._send_all(conn.sock, out)
        return keep

    def _respond(self, conn: _Conn) -> Tuple[bool, bytes]:
        """Parse the buffered request, consume it from ``conn.buf``; (keep-alive, response)."""
        end = _request_end(conn.buf)
        assert end is not None
        head, body = end
        if body < 0:  # chunked or large body on a GET: answer once and close
            raw, conn.buf = conn.buf[:head], b""
        else:
            raw, conn.buf = conn.buf[:head], conn.buf[head + body:]
        peer = (conn.addr, 0)
        handler = _Handler(raw, peer, self)
        handler.handle_one_request()
        out = handler.wfile.getvalue()  # type: ignore[attr-defined]
        return not handler.close_connection and body >= 0, out

    @staticmethod
    def _send_all(sock: Any, data: bytes) -> None:
        deadline = time.monotonic() + WRITE_TIMEOUT_S
        view = memoryview(data)
        try:
            while view:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("response not taken within the write deadline")
                sock.settimeout(left)
                sent = sock.send(view[:65536])
                view = view[sent:]
        finally:
            with contextlib.suppress(OSError):
                sock.setblocking(False)
