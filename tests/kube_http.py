"""The HTTP side of the Kubernetes API double: the request handler (TLS handshake in the
handler thread, authentication, fault injection, JSON answers), Status objects as
kube-apiserver writes them, and a kubeconfig writer for tests."""

import contextlib
import json
import socket
import ssl
import time
from http.server import BaseHTTPRequestHandler
from typing import Any, Dict, Optional
from urllib.parse import parse_qs, urlsplit


def status_object(code: int, reason: str, message: str, **details: Any) -> Dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": details,
        "code": code,
    }


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    double: Any  # the KubeDouble

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def handle(self) -> None:
        conn = self.request
        try:
            conn.settimeout(10)
            conn.do_handshake()
        except (ssl.SSLError, OSError):
            return
        super().handle()

    def _user(self) -> Optional[str]:
        auth = self.headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            return self.double.tokens.get(auth[7:])  # an unknown token is 401, not a fallback
        cert = self.connection.getpeercert()
        if cert:
            for rdn in cert.get("subject", ()):
                for key, value in rdn:
                    if key == "commonName":
                        return str(value)
        return None

    def _serve(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        split = urlsplit(self.path)
        user = self._user()
        fault = self.double.take_fault(method)
        entry = {
            "method": method,
            "path": split.path,
            "user": user,
            "content_type": self.headers.get("Content-Type", ""),
            "time": time.time(),
        }
        self.double.log.append(entry)
        if fault is not None and fault.kind == "reset":
            entry["status"] = "reset"
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return
        if fault is not None and fault.kind == "hang":
            self.double._stop.wait(fault.seconds)
            fault = None
        if fault is not None:
            code = fault.status
            body: Any = status_object(
                code,
                "InternalError" if code >= 500 else "TooManyRequests",
                fault.message or f"injected {code}",
            )
            headers = (
                {"Retry-After": str(int(fault.retry_after))}
                if fault.retry_after is not None
                else {}
            )
        else:
            try:
                parsed = json.loads(raw) if raw else None
            except ValueError:
                parsed = "not json"
            entry["body"] = parsed
            code, body = self.double.handle(
                method,
                split.path,
                parse_qs(split.query),
                user,
                entry["content_type"].split(";")[0].strip(),
                parsed,
            )
            headers = {}
        entry["status"] = code
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._serve("GET")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_DELETE(self) -> None:
        self._serve("DELETE")


def kubeconfig_yaml(
    server: str,
    ca_path: Optional[str] = None,
    user: Optional[Dict[str, Any]] = None,
    ca_data: Optional[bytes] = None,
    context: str = "kubelet",
) -> str:
    """A kubeconfig text for tests (JSON is valid YAML)."""
    import base64

    cluster: Dict[str, Any] = {"server": server}
    if ca_data is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca_data).decode()
    elif ca_path is not None:
        cluster["certificate-authority"] = ca_path
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": context,
            "clusters": [{"name": "c", "cluster": cluster}],
            "contexts": [{"name": context, "context": {"cluster": "c", "user": "u"}}],
            "users": [{"name": "u", "user": user or {}}],
        },
        indent=2,
    )
