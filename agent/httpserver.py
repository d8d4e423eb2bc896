"""The metrics endpoint: serves bytes rendered once per Report; a scrape never computes.

A small threaded HTTP/1.1 server (keep-alive, so Prometheus reuses its connection). TLS is
per connection: the handshake runs in the connection's own thread, so a slow or hostile
client cannot stall accept(). Connections are bounded; idle ones time out. The web config
(TLS, basic auth) can be swapped at runtime (SIGHUP) without rebinding the port.
"""
import contextlib
import gzip
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional, Tuple

from agent.webconfig import WebConfig

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MAX_CONNECTIONS = 64
IDLE_TIMEOUT_S = 30.0
HANDSHAKE_TIMEOUT_S = 10.0
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


class _Payload:
    """The current exposition, plain and gzipped, swapped atomically (one reference)."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.gz = gzip.compress(body, compresslevel=6, mtime=0)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "MetricsServer"
    timeout = IDLE_TIMEOUT_S

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
        # Headers and body in one write: two small writes on a keep-alive connection meet
        # Nagle's algorithm and the client's delayed ACK (~40 ms per response on Linux).
        self._headers_buffer.append(b"\r\n")  # type: ignore[attr-defined]
        if self.command != "HEAD":
            self._headers_buffer.append(body)  # type: ignore[attr-defined]
        self.flush_headers()

    def do_GET(self) -> None:  # noqa: N802
        web = self.server.web
        if web is not None and not web.check_authorization(self.headers.get("Authorization")):
            self._send(
                401, b"Unauthorized\n", "text/plain; charset=utf-8",
                {"WWW-Authenticate": 'Basic realm="gpu-node-agent"'},
            )
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


class MetricsServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, listen: str, web: Optional[WebConfig] = None, body: bytes = b"") -> None:
        host, port = parse_listen_address(listen)
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.web = web
        self.payload = _Payload(body)
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._thread: Optional[threading.Thread] = None
        super().__init__((host, port), _Handler)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def publish(self, body: bytes) -> None:
        self.payload = _Payload(body)

    def set_web_config(self, web: Optional[WebConfig]) -> None:
        self.web = web

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):  # too many connections: drop this one
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except Exception:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def finish_request(self, request: Any, client_address: Any) -> None:
        with contextlib.suppress(OSError):  # small responses: never wait for Nagle
            request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        web = self.web
        ctx = web.ssl_context if web is not None else None
        if ctx is None:
            request.settimeout(IDLE_TIMEOUT_S)
            self.RequestHandlerClass(request, client_address, self)  # type: ignore[arg-type]
            return
        request.settimeout(HANDSHAKE_TIMEOUT_S)
        try:
            tls = ctx.wrap_socket(request, server_side=True)
        except (OSError, ValueError):
            return  # failed handshake (plain HTTP to a TLS port, bad client cert): drop it
        try:
            tls.settimeout(IDLE_TIMEOUT_S)
            self.RequestHandlerClass(tls, client_address, self)  # type: ignore[arg-type]
        except OSError:
            pass
        finally:
            tls.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that went away mid-response is not the agent's error

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self.serve_forever, kwargs={"poll_interval": 0.5}, name="http", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


