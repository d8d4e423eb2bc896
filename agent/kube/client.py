"""A small Kubernetes API client on `requests`: the few calls the agent makes.

Every request has a timeout. Errors are classified so the publisher can back off correctly
(docs/kubernetes.md "Faults"): 401 refreshes credentials and retries once; 403 is
reported with the server's message and never hot-retried; 409 means re-read and re-apply;
429 carries Retry-After; 5xx, TLS, connection errors and exec-plugin failures are
`Unreachable`. Nothing here logs a header, a token or a key.
"""

import json
import logging
import math
import time
from typing import Any, Dict, Mapping, Optional, Tuple
from urllib.parse import quote

import requests

from agent.kube.credentials import CredentialError
from agent.kube.errors import ApiError, Unreachable, sanitize
from agent.kube.kubeconfig import KubeConfigFile

__all__ = ["ApiError", "KubeClient", "Unreachable"]

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


def _status(resp: requests.Response) -> Tuple[str, Optional[str], Optional[Dict[str, Any]]]:
    """(message, reason, details) of an error answer; the message sanitised and bounded
    (errors.sanitize: it is logged and shown)."""
    try:
        body = resp.json()
    except ValueError:
        return sanitize(resp.text or resp.reason or ""), None, None
    if isinstance(body, dict) and body.get("message"):
        details = body.get("details")
        reason = body.get("reason")
        return (
            sanitize(body["message"]),
            str(reason) if isinstance(reason, str) else None,
            details if isinstance(details, dict) else None,
        )
    return sanitize(resp.reason or ""), None, None


def _retry_after(resp: requests.Response) -> Optional[float]:
    """Retry-After in delta-seconds (what kube-apiserver sends, RFC 9110 10.2.3); an HTTP-date,
    a negative, infinite or NaN value is ignored. The caller caps it (publish.py)."""
    value = resp.headers.get("Retry-After")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return seconds


def _expect(answer: Any, kind: str, what: str) -> Dict[str, Any]:
    """A 2xx whose body is not the object asked for is treated like an error (the publisher
    backs off): never trust a JSON array, a string, or another kind as a Node."""
    if not isinstance(answer, dict) or answer.get("kind") != kind:
        shown = type(answer).__name__ if not isinstance(answer, dict) else answer.get("kind")
        raise Unreachable(f"{what}: the answer is not a {kind} ({sanitize(shown, 40)})")
    return answer


class KubeClient:
    def __init__(
        self,
        kubeconfig: KubeConfigFile,
        timeout: float = 10.0,
        session: Optional[requests.Session] = None,
    ) -> None:
        self.kubeconfig = kubeconfig
        self.server = kubeconfig.server
        self.timeout = timeout
        self.session = session or requests.Session()
        self.session.trust_env = False  # no proxy from the environment for the node's own API
        self.requests_sent = 0

    def close(self) -> None:
        self.session.close()
        self.kubeconfig.close()

    # -- transport -----------------------------------------------------------------------
    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
        params: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = None,
    ) -> Any:
        """The decoded JSON answer; raises ApiError or Unreachable. Retries once on 401."""
        for attempt in (1, 2):
            resp = self._send(method, path, body, content_type, params, timeout)
            if resp.status_code == 401 and attempt == 1:
                # Credentials expired or rotated: refresh them (re-run the exec plugin,
                # re-read tokenFile) and try exactly once more, as client-go does.
                self.kubeconfig.invalidate()
                continue
            if 200 <= resp.status_code < 300:
                try:
                    return resp.json()
                except ValueError:
                    raise Unreachable(f"{method} {path}: answer is not JSON") from None
            message, reason, details = _status(resp)
            raise ApiError(resp.status_code, message, _retry_after(resp), reason, details)
        raise AssertionError("unreachable")  # pragma: no cover

    def _send(
        self,
        method: str,
        path: str,
        body: Any,
        content_type: str,
        params: Optional[Mapping[str, str]],
        timeout: Optional[float] = None,
    ) -> requests.Response:
        try:
            creds = self.kubeconfig.credentials()
        except CredentialError as exc:
            raise Unreachable(f"credentials: {exc}") from None
        headers = {"Accept": "application/json", "User-Agent": "gpu-node-agent"}
        if creds.token:
            headers["Authorization"] = f"Bearer {creds.token}"
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body)
        cert: Optional[Tuple[str, str]] = None
        if creds.cert_file and creds.key_file:
            cert = (creds.cert_file, creds.key_file)
        self.requests_sent += 1
        timeout = self.timeout if timeout is None else timeout
        started = time.monotonic()
        try:
            resp = self.session.request(
                method,
                self.server + path,
                params=params,
                data=data,
                headers=headers,
                cert=cert,
                verify=self.kubeconfig.verify,
                timeout=(min(5.0, timeout), timeout),
                allow_redirects=False,
            )
        except requests.exceptions.SSLError as exc:
            raise Unreachable(f"TLS error talking to {self.server}: {_short(exc)}") from None
        except requests.exceptions.Timeout:
            raise Unreachable(f"{self.server}: no answer in {timeout:g}s") from None
        except requests.exceptions.RequestException as exc:
            raise Unreachable(f"{self.server}: {_short(exc)}") from None
        log.debug(
            "%s %s -> %s in %.3fs", method, path, resp.status_code, time.monotonic() - started
        )
        return resp

    # -- the calls the agent makes -------------------------------------------------------
    def get_node(self, name: str, timeout: Optional[float] = None) -> Dict[str, Any]:
        path = f"/api/v1/nodes/{quote(name, safe='')}"
        return _expect(self.request("GET", path, timeout=timeout), "Node", f"GET {path}")

    def patch_node(self, name: str, patch: Mapping[str, Any]) -> Dict[str, Any]:
        """JSON merge patch of the Node (labels, annotations, spec.unschedulable)."""
        path = f"/api/v1/nodes/{quote(name, safe='')}"
        return _expect(self.request("PATCH", path, patch, MERGE_PATCH), "Node", f"PATCH {path}")

    def patch_node_status(self, name: str, patch: Mapping[str, Any]) -> Dict[str, Any]:
        """Strategic merge patch of nodes/<name>/status: conditions merge by `type` (a merge
        patch would replace the whole list, wiping the kubelet's own conditions)."""
        path = f"/api/v1/nodes/{quote(name, safe='')}/status"
        answer = self.request("PATCH", path, patch, STRATEGIC_MERGE_PATCH)
        return _expect(answer, "Node", f"PATCH {path}")

    def list_runtimeclasses(self, timeout: Optional[float] = None) -> Dict[str, Any]:
        path = "/apis/node.k8s.io/v1/runtimeclasses"
        answer = self.request("GET", path, timeout=timeout)
        return _expect(answer, "RuntimeClassList", f"GET {path}")

    def list_resourceslices(self, node: str, timeout: Optional[float] = None) -> Dict[str, Any]:
        """This node's ResourceSlices (resource.k8s.io/v1, GA in Kubernetes 1.34). The Node
        authorizer lets a node list them only with the field selector spec.nodeName=<itself>
        (kubernetes plugin/pkg/auth/authorizer/node/node_authorizer.go,
        authorizeResourceSlice); without it the answer is 403."""
        path = "/apis/resource.k8s.io/v1/resourceslices"
        params = {"fieldSelector": f"spec.nodeName={node}"}
        answer = self.request("GET", path, params=params, timeout=timeout)
        return _expect(answer, "ResourceSliceList", f"GET {path}")

    def self_subject_review(self) -> Dict[str, Any]:
        """Who the server takes these credentials for (authentication.k8s.io/v1
        SelfSubjectReview, GA in Kubernetes 1.28: `kubectl auth whoami`)."""
        path = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        return _expect(self.request("POST", path, body), "SelfSubjectReview", f"POST {path}")

    def create_event(self, namespace: str, event: Mapping[str, Any]) -> Dict[str, Any]:
        """POST a core/v1 Event (API reference: Event v1, create)."""
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/events"
        return _expect(self.request("POST", path, event), "Event", f"POST {path}")


def _short(exc: BaseException) -> str:
    # urllib3 wraps the cause several layers deep; the innermost reason is the useful part.
    text = str(exc)
    for marker in ("Caused by ", "reason: "):
        if marker in text:
            text = text.split(marker, 1)[1]
    return text.strip("()' ")[:200]
