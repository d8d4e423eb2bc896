"""The fleet's API server: tests/kube_double.py's KubeDouble (the kube-apiserver double whose
answers are checked against 60 recorded exchanges by tests/unit/test_kube_replay.py), reached
in-process through a requests transport adapter instead of a TLS socket.

What is real: KubeClient (agent/kube/client.py: headers, bearer token, JSON, timeouts passed
down, the 401-refresh, the error classification into ApiError/Unreachable), requests'
Session.request/prepare machinery, the kubeconfig and token loading, and the double's routing,
authorization (Node authorizer, NodeRestriction), patch semantics and resourceVersions.
What is simulated: the socket, TLS and HTTP framing (requests' HTTPAdapter is replaced by
DoubleAdapter below), and the time a request takes (zero: requests land at the simulated
instant of the agent's cycle). Bearer tokens are authenticated as the double's HTTP handler
does (tests/kube_http.py `_Handler._user`).

An outage refuses connections (requests.exceptions.ConnectionError, errno 111 text), which the
real client turns into `Unreachable`, as for a kube-apiserver that is down behind its address.
"""

import json
from collections import Counter
from typing import Any, Callable, Dict, List, Optional, Tuple
from urllib.parse import parse_qs, unquote, urlsplit

import requests
from requests.adapters import BaseAdapter
from requests.structures import CaseInsensitiveDict

from tests.kube_double import NODE_PREFIX, KubeDouble

WRITE_METHODS = ("PATCH", "POST", "PUT", "DELETE")


class FleetServer:
    """The double plus what the fleet measures: requests per simulated second (those that
    reached the server), writes per second, refused connections, and a per-token audit."""

    def __init__(self, double: KubeDouble, clock: Callable[[], float]) -> None:
        self.double = double
        self.clock = clock
        self.down = False
        self.per_second: Counter = Counter()  # int(simulated second) -> requests answered
        self.writes_per_second: Counter = Counter()
        self.refused = 0
        self.statuses: Counter = Counter()
        # token -> the node names its requests addressed (the audit of "its own node only")
        self.addressed: Dict[str, set] = {}
        self.foreign: List[Tuple[str, str]] = []  # (token's user, path) outside its own Node

    def exchange(self, request: requests.PreparedRequest) -> requests.Response:
        if self.down:
            self.refused += 1
            raise requests.exceptions.ConnectionError(
                f"HTTPSConnectionPool: Max retries exceeded with url: {request.path_url} "
                "(Caused by NewConnectionError('[Errno 111] Connection refused'))"
            )
        split = urlsplit(request.url or "")
        method = request.method or "GET"
        auth = request.headers.get("Authorization", "")
        token = auth[7:] if auth.startswith("Bearer ") else ""
        user: Optional[str] = self.double.tokens.get(token) if token else "system:anonymous"
        groups = self.double.groups_of(user, None) if user else []
        raw = request.body
        body: Any = None
        if raw:
            body = json.loads(raw.decode() if isinstance(raw, bytes) else raw)
        ctype = (request.headers.get("Content-Type") or "").split(";")[0].strip()
        code, answer = self.double.handle(
            method, split.path, parse_qs(split.query), user, groups, ctype, body
        )
        second = int(self.clock())
        self.per_second[second] += 1
        if method in WRITE_METHODS:
            self.writes_per_second[second] += 1
        self.statuses[code] += 1
        self._audit(token, user, split.path)
        return _response(request, code, json.dumps(answer).encode())

    def _audit(self, token: str, user: Optional[str], path: str) -> None:
        parts = [unquote(p) for p in path.strip("/").split("/")]
        if parts[:3] == ["api", "v1", "nodes"] and len(parts) >= 4:
            self.addressed.setdefault(token, set()).add(parts[3])
            me = user[len(NODE_PREFIX):] if user and user.startswith(NODE_PREFIX) else None
            if parts[3] != me:
                self.foreign.append((str(user), path))

    def session(self) -> requests.Session:
        """A requests.Session whose https:// transport is this server (one per agent, as each
        agent process has its own)."""
        http = requests.Session()
        http.mount("https://", DoubleAdapter(self))
        return http


class DoubleAdapter(BaseAdapter):
    def __init__(self, server: FleetServer) -> None:
        super().__init__()
        self.server = server

    def send(self, request: requests.PreparedRequest, stream: bool = False,
             timeout: Any = None, verify: Any = True, cert: Any = None,
             proxies: Any = None) -> requests.Response:
        return self.server.exchange(request)

    def close(self) -> None:
        pass


def _response(request: requests.PreparedRequest, code: int, data: bytes) -> requests.Response:
    resp = requests.Response()
    resp.status_code = code
    resp._content = data
    resp.headers = CaseInsensitiveDict({"Content-Type": "application/json",
                                        "Content-Length": str(len(data))})
    resp.encoding = "utf-8"
    resp.url = request.url or ""
    resp.request = request
    resp.reason = "OK" if code < 400 else "Error"
    return resp
