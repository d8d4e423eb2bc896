"""An in-process HTTPS double of kube-apiserver 1.34 (Node,RBAC authorization, NodeRestriction).

Every answer it gives to the requests in tests/fixtures/kube-apiserver/
node-identity-exchanges-1.34.9.jsonl (60 requests to a real, unmodified kube-apiserver
v1.34.9) is the recorded one: status code, kind, reason, details, message and the Node fields
the file keeps; tests/unit/test_kube_replay.py replays the file in order and compares.
Worth knowing, each a recorded line:

- no credentials is `system:anonymous` and 403 (not 401); an unknown token or a certificate
  from a CA the server does not trust is 401 with no `details` (TLS completes: the double
  accepts the extra CAs given to `tls_accept_ca` at TLS and trusts only its own CA to
  authenticate, as the real server's authenticator does);
- a node may read only its own Node (another name, existing or not, is 403) and LIST only with
  `fieldSelector=metadata.name=<self>`; PATCH of a Node that does not exist is 404; PATCH of
  another node's object or status is 403 from NodeRestriction;
- NodeRestriction (plugin/pkg/admission/noderestriction/admission.go) judges the labels of
  both the object and the `/status` subresource (a `/status` patch that carries
  `metadata.labels` changes them: nodeStatusStrategy resets only spec); taints added or removed
  are 403; spec.unschedulable is allowed;
- invalid label values and label/annotation keys are 422 `Invalid` with `details.causes`
  (the real server lists each cause four times; agent/outputs/node/labels.py has the rules);
- strategic merge patch puts a condition it adds first (tests/kube_patch.py); an element
  without `type` is 500; JSON merge patch of /status replaces the whole list; status in a
  patch of the main object is dropped;
- an unknown resource is 403 for a node (the authorizer runs before routing); PUT with no
  body is 400; PATCH with `application/json` is 415.

Not recorded (answered as the Kubernetes API reference, kubernetes.io/docs/reference/
kubernetes-api/, says; listed in docs/kubernetes.md): GET of the node's own name before the
Node exists (404 NotFound: the Node authorizer lets a node read its own name), SelfSubjectReview
(`POST /apis/authentication.k8s.io/v1/selfsubjectreviews`, 201 with status.userInfo),
Events (`POST /api/v1/namespaces/{ns}/events`, 201; the system:node ClusterRole may create
events), the order of checks when one request breaks two rules, and ResourceSlices: no real
exchange for `GET /apis/resource.k8s.io/v1/resourceslices` was recorded. The double answers a
ResourceSliceList (apiVersion resource.k8s.io/v1, metadata.resourceVersion, items) to a node
only with `fieldSelector=spec.nodeName=<itself>`, and 403 otherwise, as the Node authorizer
decides (kubernetes plugin/pkg/auth/authorizer/node/node_authorizer.go,
authorizeResourceSlice: "can only list/watch/deletecollection resourceslices with nodeName
field selector", appended to RBAC's denial as the recorded 403s of Nodes show).

It keeps resourceVersion (a stale precondition is 409), logs and counts every request, and
injects faults (status codes with Retry-After, an arbitrary 200 body, hangs, resets).
"""

import copy
import datetime
import json
import ssl
import threading
from http.server import ThreadingHTTPServer
from typing import Any, Dict, List, Optional, Tuple
from urllib.parse import unquote

# The validation messages are apimachinery's wording; the replay test compares them with the
# recorded server's, so reusing the agent's port here is checked, not assumed.
from agent.outputs.node.labels import (
    annotation_key_errors,
    label_value_errors,
    qualified_name_errors,
)
from tests.kube_certs import CA
from tests.kube_http import _Handler, _NotJson, kubeconfig_yaml, status_object
from tests.kube_patch import MergeKeyError, merge_patch, strategic_merge_patch

__all__ = ["CA", "KubeDouble", "kubeconfig_yaml", "merge_patch", "strategic_merge_patch"]

NODE_PREFIX = "system:node:"
ANONYMOUS = "system:anonymous"
CA_NAME = "kube-double-ca"
# How many times the recorded server lists one invalid label or annotation in details.causes.
CAUSE_REPEATS = 4
_NOT_TAINT = [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]


class Fault:
    def __init__(
        self,
        kind: str,
        count: int,
        status: int = 503,
        message: str = "",
        retry_after: Optional[str] = None,
        seconds: float = 0.0,
        method: Optional[str] = None,
        body: Any = None,
    ) -> None:
        self.kind, self.count, self.status, self.message = kind, count, status, message
        self.retry_after, self.seconds, self.method = retry_after, seconds, method
        self.body = body


def _forbidden(message: str, **details: Any) -> Tuple[int, Dict[str, Any]]:
    return 403, status_object(403, "Forbidden", message, details)


def _not_found(message: str, **details: Any) -> Tuple[int, Dict[str, Any]]:
    return 404, status_object(404, "NotFound", message, details)


# -- the server ----------------------------------------------------------------------------
class KubeDouble:
    def __init__(self, directory: str) -> None:
        self.dir = directory
        self.ca = CA(directory, name=CA_NAME)
        self.ca_name = CA_NAME
        self.server_cert, self.server_key, _, _ = self.ca.issue("kube-apiserver", server=True)
        self.nodes: Dict[str, Dict[str, Any]] = {}
        self.runtimeclasses: Dict[str, Dict[str, Any]] = {}
        self.resourceslices: List[Dict[str, Any]] = []
        self.events: List[Dict[str, Any]] = []
        self.tokens: Dict[str, str] = {}
        self.log: List[Dict[str, Any]] = []
        self.faults: List[Fault] = []
        self.event_answer: Optional[int] = None  # e.g. 403: refuse every Event
        self._tls_cas: List[str] = []
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

    def add_resourceslice(
        self,
        node: str,
        uuids: List[str],
        driver: str = "gpu.nvidia.com",
        generation: int = 1,
    ) -> Dict[str, Any]:
        """A ResourceSlice as the DRA driver publishes one per node: devices named gpu-<i> with
        the `uuid` attribute (k8s-dra-driver-gpu cmd/gpu-kubelet-plugin/deviceinfo.go)."""
        item = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{driver}-{len(self.resourceslices)}",
                         "resourceVersion": self._next_rv()},
            "spec": {
                "driver": driver,
                "nodeName": node,
                "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
                "devices": [
                    {"name": f"gpu-{i}", "attributes": {"type": {"string": "gpu"},
                                                         "uuid": {"string": uuid}}}
                    for i, uuid in enumerate(uuids)
                ],
            },
        }
        self.resourceslices.append(item)
        return item

    def add_token(self, token: str, user: str) -> None:
        self.tokens[token] = user

    def client_cert(self, node: str) -> Tuple[str, str, bytes, bytes]:
        return self.ca.issue(f"{NODE_PREFIX}{node}", org="system:nodes")

    def admin_cert(self) -> Tuple[str, str, bytes, bytes]:
        return self.ca.issue("kubernetes-admin", org="system:masters", stem="admin")

    def tls_accept_ca(self, path: str) -> None:
        """Let TLS complete for client certificates from this CA (authentication still
        refuses them: 401). Call before start()."""
        self._tls_cas.append(path)

    @staticmethod
    def groups_of(user: str, org: Optional[str]) -> List[str]:
        groups = [org] if org else []
        if user.startswith(NODE_PREFIX) and "system:nodes" not in groups:
            groups.append("system:nodes")
        return groups + ["system:authenticated"]

    def inject(
        self,
        status: int = 503,
        count: int = 1,
        message: str = "",
        retry_after: Optional[Any] = None,
        method: Optional[str] = None,
        body: Any = None,
    ) -> None:
        """The next ``count`` requests (of ``method``) answer ``status`` with a Status (or
        ``body``, any JSON value) and, when given, ``Retry-After: <retry_after>`` verbatim."""
        ra = None if retry_after is None else (
            str(int(retry_after)) if isinstance(retry_after, float) and retry_after.is_integer()
            else str(retry_after)
        )
        self.faults.append(Fault("status", count, status, message, ra, method=method, body=body))

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
            if entry["path"].endswith("/events"):
                key = entry["method"] + " event"
            out[key] = out.get(key, 0) + 1
        return out

    # lifecycle
    def start(self) -> "KubeDouble":
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.server_cert, self.server_key)
        ctx.load_verify_locations(self.ca.path)
        for extra in self._tls_cas:
            ctx.load_verify_locations(extra)
        ctx.verify_mode = ssl.CERT_OPTIONAL  # a client cert, a bearer token, or nothing
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
        groups: List[str],
        ctype: str,
        body: Any,
    ) -> Tuple[int, Any]:
        with self._lock:
            if user is None:
                return 401, status_object(401, "Unauthorized", "Unauthorized")
            return self._route(method, path, query, user, groups, ctype, body)

    def _route(
        self,
        method: str,
        path: str,
        query: Dict[str, List[str]],
        user: str,
        groups: List[str],
        ctype: str,
        body: Any,
    ) -> Tuple[int, Any]:
        me = user[len(NODE_PREFIX) :] if user.startswith(NODE_PREFIX) else None
        admin = "system:masters" in groups
        parts = [unquote(p) for p in path.strip("/").split("/")]
        verb = _verb(method, parts)
        if parts[:4] == ["apis", "authentication.k8s.io", "v1", "selfsubjectreviews"]:
            return self._selfsubjectreview(method, user, groups)
        if parts[:3] == ["apis", "node.k8s.io", "v1"] and parts[3:4] == ["runtimeclasses"]:
            return self._runtimeclasses(method, parts[4:], user, me or user, admin)
        if parts[:3] == ["apis", "resource.k8s.io", "v1"] and parts[3:4] == ["resourceslices"]:
            return self._resourceslices(method, parts[4:], query, user, me, admin)
        if parts[:3] == ["api", "v1", "namespaces"] and len(parts) >= 5 and parts[4] == "events":
            return self._events(method, parts[3], parts[5:], user, admin or me is not None, body)
        if parts[:2] != ["api", "v1"] or len(parts) < 3:
            return 404, status_object(
                404, "NotFound", "the server could not find the requested resource", {}
            )
        resource, name = parts[2], (parts[3] if len(parts) > 3 else "")
        if resource != "nodes":
            if admin:
                return 404, status_object(
                    404, "NotFound", "the server could not find the requested resource", {}
                )
            what = f'{resource} "{name}"' if name else resource
            return _forbidden(
                f'{what} is forbidden: User "{user}" cannot {verb} resource "{resource}" in API '
                'group "" at the cluster scope',
                **({"name": name} if name else {}),
                kind=resource,
            )
        if user == ANONYMOUS:
            what = f'nodes "{name}"' if name else "nodes"
            return _forbidden(
                f'{what} is forbidden: User "{user}" cannot {verb} resource "nodes" in API '
                'group "" at the cluster scope',
                **({"name": name} if name else {}),
                kind="nodes",
            )
        if len(parts) == 3 and method == "GET":
            return self._list_nodes(query, user, me)
        if len(parts) not in (4, 5) or (len(parts) == 5 and parts[4] != "status"):
            return _not_found("the server could not find the requested resource")
        sub = parts[4] if len(parts) == 5 else ""
        if method == "GET":
            if me is not None and name != me:
                return _forbidden(
                    f'nodes "{name}" is forbidden: User "{user}" cannot get resource "nodes" in '
                    f"API group \"\" at the cluster scope: node '{me}' cannot read '{name}', "
                    "only its own Node object",
                    name=name,
                    kind="nodes",
                )
            if name not in self.nodes:
                return _not_found(f'nodes "{name}" not found', name=name, kind="nodes")
            return 200, self.nodes[name]
        if method == "PUT" and body is None:
            return 400, status_object(
                400,
                "BadRequest",
                "the object provided is unrecognized (must be of type Node): couldn't get "
                "version/kind; json parse error: unexpected end of JSON input (<empty>)",
            )
        if method != "PATCH":
            return 405, status_object(
                405, "MethodNotAllowed", f"{method} is not implemented by the double", {}
            )
        return self._patch(name, sub, ctype, body, me)

    def _list_nodes(
        self, query: Dict[str, List[str]], user: str, me: Optional[str]
    ) -> Tuple[int, Any]:
        selector = (query.get("fieldSelector") or [""])[0]
        if me is not None and selector != f"metadata.name={me}":
            if selector.startswith("metadata.name="):
                other = selector.split("=", 1)[1]
                return _forbidden(
                    f'nodes "{other}" is forbidden: User "{user}" cannot list resource "nodes" '
                    f"in API group \"\" at the cluster scope: node '{me}' cannot read "
                    f"'{other}', only its own Node object",
                    name=other,
                    kind="nodes",
                )
            return _forbidden(
                f'nodes is forbidden: User "{user}" cannot list resource "nodes" in API group '
                f"\"\" at the cluster scope: node '{me}' cannot read all nodes, only its own "
                "Node object",
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
        if ctype == "application/merge-patch+json":
            apply = merge_patch
        elif ctype == "application/strategic-merge-patch+json":
            apply = strategic_merge_patch
        else:
            return 415, status_object(
                415, "UnsupportedMediaType", "415: Unsupported Media Type", {}
            )
        if name not in self.nodes:
            return _not_found(f'nodes "{name}" not found', name=name, kind="nodes")
        if not isinstance(body, dict):
            kind = "array" if isinstance(body, list) else (
                "string" if isinstance(body, str) else "value"
            )
            if isinstance(body, _NotJson) or body is None:
                message = "error decoding patch: unexpected end of JSON input"
            else:
                message = (
                    f"error decoding patch: json: cannot unmarshal {kind} into Go value of "
                    "type map[string]interface {}"
                )
            return 400, status_object(400, "BadRequest", message)
        old = self.nodes[name]
        try:
            new = apply(old, body)
        except MergeKeyError as exc:
            return 500, status_object(500, None, str(exc))
        if not isinstance(new.get("metadata"), dict):
            new["metadata"] = {}
        wanted_rv = (body.get("metadata") or {}).get("resourceVersion") if isinstance(
            body.get("metadata"), dict
        ) else None
        if wanted_rv is not None and wanted_rv != old["metadata"]["resourceVersion"]:
            return 409, status_object(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on nodes "{name}": the object has been modified; '
                "please apply your changes to the latest version and try again",
                {"name": name, "kind": "nodes"},
            )
        if sub == "status":
            # nodeStatusStrategy.PrepareForUpdate resets spec only: labels and annotations in
            # a /status patch are applied (recorded), and judged by NodeRestriction below.
            new["spec"] = copy.deepcopy(old.get("spec", {}))
        else:
            new["status"] = copy.deepcopy(old["status"])  # nodeStrategy drops status
        new["metadata"]["name"] = name
        if me is not None:
            if me != name:
                return _forbidden(
                    f'nodes "{name}" is forbidden: node "{me}" is not allowed to modify node '
                    f'"{name}"',
                    name=name,
                    kind="nodes",
                )
            denied = self._noderestriction(old, new)
            if denied:
                return _forbidden(f'nodes "{me}" is forbidden: {denied}', name=me, kind="nodes")
        invalid = _validate_meta(new["metadata"])
        if invalid:
            causes = [
                {"reason": "FieldValueInvalid", "message": m, "field": f}
                for f, m in invalid
                for _ in range(CAUSE_REPEATS)
            ]
            shown = [f"{f}: {m}" for f, m in dict.fromkeys(invalid)]
            text = shown[0] if len(shown) == 1 else "[" + ", ".join(shown) + "]"
            return 422, status_object(
                422,
                "Invalid",
                f'Node "{name}" is invalid: {text}',
                {"name": name, "kind": "Node", "causes": causes},
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

    def _selfsubjectreview(self, method: str, user: str, groups: List[str]) -> Tuple[int, Any]:
        # API reference, SelfSubjectReview v1 (authentication.k8s.io): POST returns 201 with
        # status.userInfo; the system:basic-user role grants it to system:authenticated.
        if method != "POST":
            return 405, status_object(405, "MethodNotAllowed", f"{method} is not supported", {})
        if user == ANONYMOUS:
            return _forbidden(
                'selfsubjectreviews.authentication.k8s.io is forbidden: User "system:anonymous" '
                'cannot create resource "selfsubjectreviews" in API group '
                '"authentication.k8s.io" at the cluster scope',
                group="authentication.k8s.io",
                kind="selfsubjectreviews",
            )
        return 201, {
            "kind": "SelfSubjectReview",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"creationTimestamp": _now()},
            "status": {"userInfo": {"username": user, "groups": groups}},
        }

    def _events(
        self, method: str, namespace: str, rest: List[str], user: str, allowed: bool, body: Any
    ) -> Tuple[int, Any]:
        # API reference, Event v1 (core): POST /api/v1/namespaces/{namespace}/events, 201; the
        # system:node ClusterRole may create events.
        if method != "POST" or rest:
            return 405, status_object(405, "MethodNotAllowed", f"{method} is not supported", {})
        if not allowed or self.event_answer == 403:
            return _forbidden(
                f'events is forbidden: User "{user}" cannot create resource "events" in API '
                f'group "" in the namespace "{namespace}"',
                kind="events",
            )
        if self.event_answer is not None:
            return self.event_answer, status_object(
                self.event_answer, "InternalError", f"injected {self.event_answer}", {}
            )
        if not isinstance(body, dict):
            return 400, status_object(400, "BadRequest", "the object provided is unrecognized")
        event = copy.deepcopy(body)
        event.setdefault("metadata", {})["namespace"] = namespace
        event["metadata"]["resourceVersion"] = self._next_rv()
        self.events.append(event)
        return 201, event

    def _runtimeclasses(
        self, method: str, rest: List[str], user: str, who: str, admin: bool
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
            return _not_found(
                f'runtimeclasses.node.k8s.io "{rest[0]}" not found',
                group="node.k8s.io",
                kind="runtimeclasses",
                name=rest[0],
            )
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(
            method, method.lower()
        )
        if not admin:
            return _forbidden(
                f'runtimeclasses.node.k8s.io is forbidden: User "{user}" cannot {verb} resource '
                '"runtimeclasses" in API group "node.k8s.io" at the cluster scope',
                group="node.k8s.io",
                kind="runtimeclasses",
            )
        return 405, status_object(405, "MethodNotAllowed", "not implemented by the double", {})


    def _resourceslices(
        self,
        method: str,
        rest: List[str],
        query: Dict[str, List[str]],
        user: str,
        me: Optional[str],
        admin: bool,
    ) -> Tuple[int, Any]:
        # Not recorded (see the module docstring): the Node authorizer's rule for a node, RBAC's
        # denial wording for the rest; the list filtered by the field selector as the server's
        # spec.nodeName field selector does.
        verb = ("list" if not rest else "get") if method == "GET" else _verb(method, rest)
        denied = (
            f'resourceslices.resource.k8s.io is forbidden: User "{user}" cannot {verb} resource '
            '"resourceslices" in API group "resource.k8s.io" at the cluster scope'
        )
        selector = (query.get("fieldSelector") or [""])[0]
        wanted = [r.split("=", 1)[1] for r in selector.split(",") if r.startswith("spec.nodeName=")]
        if method != "GET" or rest:
            if not admin:
                return _forbidden(denied, group="resource.k8s.io", kind="resourceslices")
            return 405, status_object(405, "MethodNotAllowed", "not implemented by the double", {})
        if me is not None and me not in wanted:
            return _forbidden(
                f"{denied}: can only list/watch/deletecollection resourceslices with nodeName "
                "field selector",
                group="resource.k8s.io",
                kind="resourceslices",
            )
        if me is None and not admin:
            return _forbidden(denied, group="resource.k8s.io", kind="resourceslices")
        items = [s for s in self.resourceslices
                 if not wanted or s["spec"].get("nodeName") in wanted]
        return 200, {
            "kind": "ResourceSliceList",
            "apiVersion": "resource.k8s.io/v1",
            "metadata": {"resourceVersion": str(self._rv)},
            "items": copy.deepcopy(items),
        }


def _verb(method: str, parts: List[str]) -> str:
    if method == "GET":
        return "get" if len(parts) > 3 else "list"
    return {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(
        method, method.lower()
    )


def _quote(value: str) -> str:
    return json.dumps(value)  # Go's %q for the printable ASCII the tests use


def _validate_meta(meta: Dict[str, Any]) -> List[Tuple[str, str]]:
    """(field, message) as ValidateObjectMeta reports labels and annotations."""
    out: List[Tuple[str, str]] = []
    labels = meta.get("labels") or {}
    for key in sorted(labels):
        for msg in qualified_name_errors(key):
            out.append(("metadata.labels", f"Invalid value: {_quote(key)}: {msg}"))
        value = labels[key]
        for msg in label_value_errors(value if isinstance(value, str) else str(value)):
            out.append(("metadata.labels", f"Invalid value: {_quote(str(value))}: {msg}"))
    annotations = meta.get("annotations") or {}
    for key in sorted(annotations):
        for msg in annotation_key_errors(key):
            out.append(("metadata.annotations", f"Invalid value: {_quote(key)}: {msg}"))
    # apimachinery pkg/api/validation/objectmeta.go ValidateAnnotationsSize: keys and values
    # together at most TotalAnnotationSizeLimitB (256 KiB), field.TooLong's wording.
    total = sum(len(str(k).encode()) + len(str(v).encode()) for k, v in annotations.items())
    if total > TOTAL_ANNOTATION_SIZE_LIMIT_B:
        out.append(("metadata.annotations",
                    f"Too long: must have at most {TOTAL_ANNOTATION_SIZE_LIMIT_B} bytes"))
    return out


TOTAL_ANNOTATION_SIZE_LIMIT_B = 256 * (1 << 10)


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# NodeRestriction's label rule, written here independently of agent/outputs/node/labels.py (which the
# tests check against this): plugin/pkg/admission/noderestriction/admission.go
# getForbiddenLabels and k8s.io/kubelet/pkg/apis/well_known_labels.go IsKubeletLabel.
_KUBELET_EXACT = {
    "kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch",
    "beta.kubernetes.io/os", "beta.kubernetes.io/arch", "beta.kubernetes.io/instance-type",
    "node.kubernetes.io/instance-type", "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region", "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
}


def _restricted_label(key: str) -> bool:
    ns = key.split("/", 1)[0] if "/" in key else ""

    def under(root: str) -> bool:
        return ns == root or ns.endswith("." + root)

    if under("node-restriction.kubernetes.io"):
        return True
    if not (under("kubernetes.io") or under("k8s.io")):
        return False
    kubelet = key in _KUBELET_EXACT or under("kubelet.kubernetes.io") or under("node.kubernetes.io")
    return not kubelet
