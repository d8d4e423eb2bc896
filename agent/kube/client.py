"""A small Kubernetes API client on `requests`: the few calls the agent makes.

Every request has a timeout. Errors are classified so the publisher can back off correctly
(DESIGN.md "Verdict to the cluster"): 401 refreshes credentials and retries once; 403 is
reported with the server's message and never hot-retried; 409 means re-read and re-apply;
429 carries Retry-After; 5xx, TLS, connection errors and exec-plugin failures are
`Unreachable`. Nothing here logs a header, a token or a key.
"""

import json
import logging
import time
from typing import Any, Dict, Mapping, Optional, Tuple
from urllib.parse import quote

import requests

from agent.kube.errors import ApiError, Unreachable
from agent.kube.kubeconfig import CredentialError, KubeConfigFile

__all__ = ["ApiError", "KubeClient", "Unreachable"]

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


def _status_message(resp: requests.Response) -> str:
    try:
        body = resp.json()
    except ValueError:
        return (resp.text or resp.reason or "").strip()[:300]
    if isinstance(body, dict) and body.get("message"):
        return str(body["message"])[:500]
    return (resp.reason or "").strip()


def _retry_after(resp: requests.Response) -> Optional[float]:
    value = resp.headers.get("Retry-After")
    if value is None:
        return None
    try:
        return max(0.0, float(value))  # the apiserver sends delta-seconds
    except ValueError:
        return None


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
    ) -> Any:
        """The decoded JSON answer; raises ApiError or Unreachable. Retries once on 401."""
        for attempt in (1, 2):
            resp = self._send(method, path, body, content_type, params)
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
            raise ApiError(resp.status_code, _status_message(resp), _retry_after(resp))
        raise AssertionError("unreachable")  # pragma: no cover

    def _send(
        self,
        method: str,
        path: str,
        body: Any,
        content_type: str,
        params: Optional[Mapping[str, str]],
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
                timeout=(min(5.0, self.timeout), self.timeout),
                allow_redirects=False,
            )
        except requests.exceptions.SSLError as exc:
            raise Unreachable(f"TLS error talking to {self.server}: {_short(exc)}") from None
        except requests.exceptions.Timeout:
            raise Unreachable(f"{self.server}: no answer in {self.timeout:g}s") from None
        except requests.exceptions.RequestException as exc:
            raise Unreachable(f"{self.server}: {_short(exc)}") from None
        log.debug(
            "%s %s -> %s in %.3fs", method, path, resp.status_code, time.monotonic() - started
        )
        return resp

    # -- the calls the agent makes -------------------------------------------------------
    def get_node(self, name: str) -> Dict[str, Any]:
        return dict(self.request("GET", f"/api/v1/nodes/{quote(name, safe='')}"))

    def patch_node(self, name: str, patch: Mapping[str, Any]) -> Dict[str, Any]:
        """JSON merge patch of the Node (labels, annotations, spec.unschedulable)."""
        return dict(
            self.request("PATCH", f"/api/v1/nodes/{quote(name, safe='')}", patch, MERGE_PATCH)
        )

    def patch_node_status(self, name: str, patch: Mapping[str, Any]) -> Dict[str, Any]:
        """Strategic merge patch of nodes/<name>/status: conditions merge by `type` (a merge
        patch would replace the whole list, wiping the kubelet's own conditions)."""
        return dict(
            self.request(
                "PATCH",
                f"/api/v1/nodes/{quote(name, safe='')}/status",
                patch,
                STRATEGIC_MERGE_PATCH,
            )
        )

    def list_runtimeclasses(self) -> Dict[str, Any]:
        return dict(self.request("GET", "/apis/node.k8s.io/v1/runtimeclasses"))


def _short(exc: BaseException) -> str:
    # urllib3 wraps the cause several layers deep; the innermost reason is the useful part.
    text = str(exc)
    for marker in ("Caused by ", "reason: "):
        if marker in text:
            text = text.split(marker, 1)[1]
    return text.strip("()' ")[:200]
