"""One HTTP/1.1 request of the metrics endpoint, from buffered bytes to response bytes.

The endpoint's I/O thread (agent/outputs/metrics_server.py) buffers a whole request before
anything here runs; this module finds where a request ends, answers it with
http.server.BaseHTTPRequestHandler's parser (fed from the buffer, never from the socket),
and writes a response under one deadline for the whole of it.
"""
import contextlib
import gzip
import io
import time
from http.server import BaseHTTPRequestHandler
from typing import Any, Dict, Optional, Tuple

from agent.outputs.webconfig import AUTH_LIMITED, AUTH_OK

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
WRITE_TIMEOUT_S = 10.0
MAX_HEADER_BYTES = 16 * 1024
MAX_BODY_BYTES = 4 * 1024  # GET/HEAD carry none; a small one is read and ignored
LANDING = (
    b"<html><head><title>gpu-node-agent</title></head><body><h1>gpu-node-agent</h1>"
    b'<p><a href="/metrics">Metrics</a></p></body></html>\n'
)


def parse_listen_address(text: str) -> Tuple[str, int]:
    """"host:port", "[v6]:port" or ":port" (all interfaces, as node_exporter takes it)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"listen address {text!r}: expected host:port")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


class Payload:
    """The current exposition, plain and gzipped, swapped atomically (one reference)."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.gz = gzip.compress(body, compresslevel=6, mtime=0)


def request_end(buf: bytes) -> Optional[Tuple[int, int]]:
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


class Handler(BaseHTTPRequestHandler):
    """One request, parsed from the bytes the I/O thread buffered; the response goes to a
    buffer that the worker then writes with a deadline."""

    protocol_version = "HTTP/1.1"
    server: Any  # agent/outputs/metrics_server.py MetricsServer: .web, .payload

    def __init__(self, raw: bytes, client: Tuple[str, int], server: Any) -> None:
        # BaseRequestHandler.__init__ would read from the socket; everything is buffered.
        self.rfile = io.BytesIO(raw)
        self.wfile = io.BytesIO()
        self.client_address = client
        self.server = server
        self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass  # one log line per scrape would flood the journal

    def _send(
        self, code: int, body: bytes, ctype: str, extra: Optional[Dict[str, str]] = None
    ) -> None:
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


def respond(conn: Any, server: Any) -> Tuple[bool, bytes]:
    """Parse the buffered request, consume it from ``conn.buf``; (keep-alive, response)."""
    end = request_end(conn.buf)
    assert end is not None
    head, body = end
    if body < 0:  # chunked or large body on a GET: answer once and close
        raw, conn.buf = conn.buf[:head], b""
    else:
        raw, conn.buf = conn.buf[:head], conn.buf[head + body:]
    peer = (conn.addr, 0)
    handler = Handler(raw, peer, server)
    handler.handle_one_request()
    out = handler.wfile.getvalue()  # type: ignore[attr-defined]
    return not handler.close_connection and body >= 0, out


def send_all(sock: Any, data: bytes) -> None:
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
