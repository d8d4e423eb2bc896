"""The HTTP side of the Kubernetes API double: the request handler (TLS handshake in the
handler thread, authentication, fault injection, JSON answers), Status objects as
kube-apiserver writes them, and a kubeconfig writer for tests."""

import contextlib
import json
import socket
import ssl
import time
from http.server import BaseHTTPRequestHandler
from typing import Any, Dict, List, Optional, Tuple
from urllib.parse import parse_qs, urlsplit


def status_object(
    code: int, reason: Optional[str], message: str, details: Optional[Dict[str, Any]] = None
) -> Dict[str, Any]:
    """A Status as kube-apiserver writes it: `reason` and `details` are left out where the real
    server leaves them out (details on 401, 400 and 500; reason on 500), recorded in
    tests/fixtures/kube-apiserver/."""
    out: Dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
    }
    if reason is not None:
        out["reason"] = reason
    if details is not None:
        out["details"] = details
    out["code"] = code
    return out


class _NotJson:
    """A request body that is not JSON (the server answers 400)."""

    def __init__(self, raw: bytes) -> None:
        self.raw = raw


def _rdn(rdns: Any, key: str) -> Optional[str]:
    for rdn in rdns:
        for k, v in rdn:
            if k == key:
                return str(v)
    return None


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

    def _user(self) -> Tuple[Optional[str], List[str]]:
        """(user, groups); user None = credentials the server rejects (401). No credentials
        at all is `system:anonymous` (anonymous auth is on by default: a 403 follows, not a
        401, as recorded)."""
        auth = self.headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            user = self.double.tokens.get(auth[7:])  # an unknown token is 401, not a fallback
            if user is None:
                return None, []
            return user, self.double.groups_of(user, None)
        cert = self.connection.getpeercert()
        if cert:
            # TLS accepted it; authentication trusts only the double's own CA (a certificate
            # from another CA completes TLS on the real server and is then 401).
            issuer = _rdn(cert.get("issuer", ()), "commonName")
            if issuer != self.double.ca_name:
                return None, []
            cn = _rdn(cert.get("subject", ()), "commonName")
            org = _rdn(cert.get("subject", ()), "organizationName")
            if cn:
                return cn, self.double.groups_of(cn, org)
        return "system:anonymous", ["system:unauthenticated"]

    def _serve(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        split = urlsplit(self.path)
        user, groups = self._user()
        fault = self.double.take_fault(method)
        entry: Dict[str, Any] = {
            "method": method,
            "path": split.path,
            "query": split.query,
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
        headers: Dict[str, str] = {}
        if fault is not None:
            code = fault.status
            if fault.body is not None:
                body: Any = fault.body
            else:
                reason = {429: "TooManyRequests", 409: "Conflict", 403: "Forbidden",
                          401: "Unauthorized"}.get(code, "InternalError")
                body = status_object(code, reason, fault.message or f"injected {code}", {})
            if fault.retry_after is not None:
                headers["Retry-After"] = str(fault.retry_after)
        else:
            try:
                parsed = json.loads(raw) if raw else None
            except ValueError:
                parsed = _NotJson(raw)
            entry["body"] = parsed
            code, body = self.double.handle(
                method,
                split.path,
                parse_qs(split.query),
                user,
                groups,
                entry["content_type"].split(";")[0].strip(),
                parsed,
            )
        entry["status"] = code
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
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
