"""An in-process HTTPS double of kube-apiserver 1.34 (Node,RBAC authorization, NodeRestriction).

It answers the way DESIGN.md records a real kube-apiserver v1.34 answering `system:node:<name>`:
merge-patch of its own labels 200; a `node-restriction.kubernetes.io/` label 403; another node's
labels or status 403; GET of another node 403; LIST with fieldSelector=metadata.name=<self> 200;
strategic-merge patch of its own /status merges conditions by `type` (200); merge-patch of
/status replaces the whole list; status inside a patch of the main object is silently dropped;
taints added or removed 403; spec.unschedulable 200; GET/LIST runtimeclasses 200, create 403.
Messages follow plugin/pkg/admission/noderestriction and the Node authorizer's wording.

Authentication: client certificates signed by the double's own throwaway CA (CN = user), or
bearer tokens registered with `add_token`. It keeps resourceVersion (conditional patches
answer 409), logs and counts every request, and injects faults (status codes with
Retry-After, hangs, connection resets).
"""

import copy
import ssl
import threading
from http.server import ThreadingHTTPServer
from typing import Any, Dict, List, Optional, Tuple
from urllib.parse import unquote

from tests.kube_certs import CA
from tests.kube_http import _Handler, kubeconfig_yaml, status_object
from tests.kube_patch import merge_patch, strategic_merge_patch

__all__ = ["CA", "KubeDouble", "kubeconfig_yaml", "merge_patch", "strategic_merge_patch"]

NODE_PREFIX = "system:node:"
# kubelet-settable label namespaces (k8s.io/kubelet/pkg/apis well_known_labels), the rest of
# kubernetes.io / k8s.io is refused by NodeRestriction.
_KUBELET_LABELS = (
    "kubelet.kubernetes.io/",
    "node.kubernetes.io/",
    "beta.kubernetes.io/",
    "kubernetes.io/hostname",
    "kubernetes.io/arch",
    "kubernetes.io/os",
    "topology.kubernetes.io/",
    "failure-domain.beta.kubernetes.io/",
)


class Fault:
    def __init__(
        self,
        kind: str,
        count: int,
        status: int = 503,
        message: str = "",
        retry_after: Optional[float] = None,
        seconds: float = 0.0,
        method: Optional[str] = None,
    ) -> None:
        self.kind, self.count, self.status, self.message = kind, count, status, message
        self.retry_after, self.seconds, self.method = retry_after, seconds, method


# -- the server ----------------------------------------------------------------------------
class KubeDouble:
    def __init__(self, directory: str) -> None:
        self.dir = directory
        self.ca = CA(directory)
        self.server_cert, self.server_key, _, _ = self.ca.issue("kube-apiserver", server=True)
        self.nodes: Dict[str, Dict[str, Any]] = {}
        self.runtimeclasses: Dict[str, Dict[str, Any]] = {}
        self.tokens: Dict[str, str] = {}
        self.log: List[Dict[str, Any]] = []
        self.faults: List[Fault] = []
        self._rv = 1000
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._server: Optional[ThreadingHTTPServer] = None
        self._thread: Optional[threading.Thread] = None
        self.port = 0

    # setup
    def add_node(
        self,
        name: str,
        labels: Optional[Dict[str, str]] = None,
        conditions: Optional[List[Dict[str, Any]]] = None,
        **spec: Any,
    ) -> None:
        kubelet_conditions = [
            {
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "kubelet is posting ready status",
                "lastHeartbeatTime": "2026-11-29T00:00:00Z",
                "lastTransitionTime": "2026-11-29T00:00:00Z",
            }
        ]
        self.nodes[name] = {
            "kind": "Node",
            "apiVersion": "v1",
            "metadata": {
                "name": name,
                "uid": f"uid-{name}",
                "resourceVersion": self._next_rv(),
                "labels": {"kubernetes.io/hostname": name, **(labels or {})},
                "annotations": {},
            },
            "spec": dict(spec),
            "status": {"conditions": kubelet_conditions + list(conditions or [])},
        }

    def add_runtimeclass(self, name: str, handler: str) -> None:
        self.runtimeclasses[name] = {
            "apiVersion": "node.k8s.io/v1",
            "kind": "RuntimeClass",
            "metadata": {"name": name, "resourceVersion": self._next_rv()},
            "handler": handler,
        }

    def add_token(self, token: str, user: str) -> None:
        self.tokens[token] = user

    def client_cert(self, node: str) -> Tuple[str, str, bytes, bytes]:
        return self.ca.issue(f"{NODE_PREFIX}{node}", org="system:nodes")

    def inject(
        self,
        status: int = 503,
        count: int = 1,
        message: str = "",
        retry_after: Optional[float] = None,
        method: Optional[str] = None,
    ) -> None:
        self.faults.append(Fault("status", count, status, message, retry_after, method=method))

    def inject_hang(self, seconds: float, count: int = 1) -> None:
        self.faults.append(Fault("hang", count, seconds=seconds))

    def inject_reset(self, count: int = 1) -> None:
        self.faults.append(Fault("reset", count))

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def counts(self, since: int = 0) -> Dict[str, int]:
        out: Dict[str, int] = {}
        for entry in self.log[since:]:
            key = entry["method"] + (" status" if entry["path"].endswith("/status") else "")
            out[key] = out.get(key, 0) + 1
        return out

    # lifecycle
    def start(self) -> "KubeDouble":
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.server_cert, self.server_key)
        ctx.load_verify_locations(self.ca.path)
        ctx.verify_mode = ssl.CERT_OPTIONAL  # a client cert or a bearer token
        double = self

        class Handler(_Handler):
            pass

        Handler.double = double
        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        server.socket = ctx.wrap_socket(
            server.socket, server_side=True, do_handshake_on_connect=False
        )
        self._server = server
        self.port = server.server_address[1]
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    # request handling (called from handler threads)
    def take_fault(self, method: str) -> Optional[Fault]:
        with self._lock:
            for fault in self.faults:
                if fault.count > 0 and (fault.method is None or fault.method == method):
                    fault.count -= 1
                    return fault
        return None

    def handle(
        self,
        method: str,
        path: str,
        query: Dict[str, List[str]],
        user: Optional[str],
        ctype: str,
        body: Any,
    ) -> Tuple[int, Any]:
        with self._lock:
            return self._route(method, path, query, user, ctype, body)

    def _route(
        self,
        method: str,
        path: str,
        query: Dict[str, List[str]],
        user: Optional[str],
        ctype: str,
        body: Any,
    ) -> Tuple[int, Any]:
        if user is None:
            return 401, status_object(401, "Unauthorized", "Unauthorized")
        me = user[len(NODE_PREFIX) :] if user.startswith(NODE_PREFIX) else None
        parts = [unquote(p) for p in path.strip("/").split("/")]
        if parts[:3] == ["apis", "node.k8s.io", "v1"] and parts[3:4] == ["runtimeclasses"]:
            return self._runtimeclasses(method, parts[4:], user, me)
        if parts[:3] != ["api", "v1", "nodes"]:
            return 404, status_object(
                404, "NotFound", "the server could not find the requested resource"
            )
        if len(parts) == 3 and method == "GET":
            return self._list_nodes(query, user, me)
        if len(parts) not in (4, 5) or (len(parts) == 5 and parts[4] != "status"):
            return 404, status_object(
                404, "NotFound", "the server could not find the requested resource"
            )
        name, sub = parts[3], (parts[4] if len(parts) == 5 else "")
        if method == "GET":
            if me is not None and name != me:
                return 403, status_object(
                    403,
                    "Forbidden",
                    f'nodes "{name}" is forbidden: User "{user}" cannot get resource "nodes" in '
                    f"API group \"\" at the cluster scope: node '{me}' cannot read '{name}', "
                    "only its own Node object",
                    name=name,
                    kind="nodes",
                )
            if name not in self.nodes:
                return 404, status_object(
                    404, "NotFound", f'nodes "{name}" not found', name=name, kind="nodes"
                )
            return 200, self.nodes[name]
        if method != "PATCH":
            return 405, status_object(405, "MethodNotAllowed", f"{method} is not supported here")
        if me is not None and name != me:
            return 403, status_object(
                403,
                "Forbidden",
                f'nodes "{name}" is forbidden: node "{me}" is not allowed to modify node "{name}"',
                name=name,
                kind="nodes",
            )
        if name not in self.nodes:
            return 404, status_object(
                404, "NotFound", f'nodes "{name}" not found', name=name, kind="nodes"
            )
        return self._patch(name, sub, ctype, body, me)

    def _list_nodes(
        self, query: Dict[str, List[str]], user: str, me: Optional[str]
    ) -> Tuple[int, Any]:
        selector = (query.get("fieldSelector") or [""])[0]
        if me is not None and selector != f"metadata.name={me}":
            return 403, status_object(
                403,
                "Forbidden",
                f'nodes is forbidden: User "{user}" cannot list resource "nodes" in API group "" '
                f"at the cluster scope: node '{me}' can only list its own Node object",
                kind="nodes",
            )
        items = [
            n for k, n in self.nodes.items() if not selector or selector == f"metadata.name={k}"
        ]
        return 200, {
            "kind": "NodeList",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": str(self._rv)},
            "items": items,
        }

    def _patch(
        self, name: str, sub: str, ctype: str, body: Any, me: Optional[str]
    ) -> Tuple[int, Any]:
        old = self.nodes[name]
        if ctype == "application/merge-patch+json":
            apply = merge_patch
        elif ctype == "application/strategic-merge-patch+json":
            apply = strategic_merge_patch
        else:
            return 415, status_object(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types "
                "include: application/json-patch+json, application/merge-patch+json, "
                "application/apply-patch+yaml, application/strategic-merge-patch+json",
            )
        if not isinstance(body, dict):
            return 400, status_object(400, "BadRequest", "the patch is not a JSON object")
        wanted_rv = (body.get("metadata") or {}).get("resourceVersion")
        if wanted_rv is not None and wanted_rv != old["metadata"]["resourceVersion"]:
            return 409, status_object(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on nodes "{name}": the object has been modified; '
                "please apply your changes to the latest version and try again",
                name=name,
                kind="nodes",
            )
        try:
            new = apply(old, body)
        except ValueError as exc:
            return 400, status_object(400, "BadRequest", str(exc))
        if sub == "status":
            # the status subresource keeps everything but status (ResetObjectMetaForStatus)
            new = dict(copy.deepcopy(old), status=new.get("status", {}))
        else:
            new["status"] = copy.deepcopy(old["status"])  # silently dropped
        new["metadata"]["name"] = name
        if me is not None:
            denied = self._noderestriction(old, new)
            if denied:
                return 403, status_object(
                    403, "Forbidden", f'nodes "{me}" is forbidden: {denied}', name=me, kind="nodes"
                )
        new["metadata"]["resourceVersion"] = self._next_rv()
        self.nodes[name] = new
        return 200, new

    @staticmethod
    def _noderestriction(old: Dict[str, Any], new: Dict[str, Any]) -> Optional[str]:
        node = old["metadata"]["name"]
        if (old.get("spec") or {}).get("taints") != (new.get("spec") or {}).get("taints"):
            return f'node "{node}" is not allowed to modify taints'
        before = old["metadata"].get("labels") or {}
        after = new["metadata"].get("labels") or {}
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        bad = [k for k in changed if _restricted_label(k)]
        if bad:
            return f"is not allowed to modify labels: {', '.join(bad)}"
        return None

    def _runtimeclasses(
        self, method: str, rest: List[str], user: str, me: Optional[str]
    ) -> Tuple[int, Any]:
        if method == "GET" and not rest:
            return 200, {
                "kind": "RuntimeClassList",
                "apiVersion": "node.k8s.io/v1",
                "metadata": {"resourceVersion": str(self._rv)},
                "items": list(self.runtimeclasses.values()),
            }
        if method == "GET" and len(rest) == 1:
            if rest[0] in self.runtimeclasses:
                return 200, self.runtimeclasses[rest[0]]
            return 404, status_object(
                404, "NotFound", f'runtimeclasses.node.k8s.io "{rest[0]}" not found'
            )
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(
            method, method.lower()
        )
        if me is not None:
            return 403, status_object(
                403,
                "Forbidden",
                f'runtimeclasses.node.k8s.io is forbidden: User "{user}" cannot {verb} resource '
                '"runtimeclasses" in API group "node.k8s.io" at the cluster scope',
                group="node.k8s.io",
                kind="runtimeclasses",
            )
        return 405, status_object(405, "MethodNotAllowed", "not implemented by the double")


def _restricted_label(key: str) -> bool:
    if key.startswith("node-restriction.kubernetes.io/"):
        return True
    prefix = key.split("/", 1)[0] if "/" in key else ""
    in_k8s = prefix.endswith("kubernetes.io") or prefix.endswith("k8s.io")
    return in_k8s and not any(key.startswith(p) or key == p for p in _KUBELET_LABELS)
