"""What goes on a request (Credentials) and the exec credential plugin that may supply it.

Exec plugins as client-go runs them (client.authentication.k8s.io/v1beta1 and v1, as the EKS
hybrid kubelet kubeconfig uses aws-iam-authenticator): KUBERNETES_EXEC_INFO in the
environment, stdin closed (never interactive), the ExecCredential answer on stdout; its own
session so a hung plugin is killed with everything it started. Secrets are never logged nor
put in an exception message. The kubeconfig (agent/kube/kubeconfig.py) parses the spec, caches
the answer until shortly before it expires, and materialises its certificate
(agent/kube/keymaterial.py).
"""

import contextlib
import datetime
import json
import os
import signal
import subprocess
from typing import Any, Callable, Dict, List, Optional

from agent.errors import EXIT_USAGE, AgentError
from agent.kube.keymaterial import check_pair
from agent.records import field, record

EXEC_API_VERSIONS = (
    "client.authentication.k8s.io/v1beta1",
    "client.authentication.k8s.io/v1",
)
# Refresh an exec credential this long before it expires (client-go refreshes on expiry;
# a margin avoids sending a token that lapses in flight).
EXPIRY_MARGIN_S = 60.0


class CredentialError(AgentError):
    """Credentials could not be obtained (exec plugin failed, hung, or answered garbage). The
    client turns it into Unreachable, so it reaches a verdict line, not the command line; were
    one to, the fix is the kubeconfig's user or its plugin: exit 2."""

    exit_code = EXIT_USAGE


@record
class ExecSpec:
    api_version: str
    command: str
    args: List[str] = field(default_factory=list)
    env: Dict[str, str] = field(default_factory=dict)
    interactive_mode: str = "IfAvailable"
    provide_cluster_info: bool = False


@record
class Credentials:
    """What goes on a request: a bearer token and/or a client certificate (file paths)."""

    token: Optional[str] = None
    cert_file: Optional[str] = None
    key_file: Optional[str] = None
    expires_at: Optional[float] = None  # epoch seconds; None = does not expire

    def __repr__(self) -> str:  # never print a token
        return (
            f"Credentials(token={'<set>' if self.token else None}, cert_file={self.cert_file!r}, "
            f"expires_at={self.expires_at!r})"
        )


def run_exec(
    spec: ExecSpec, server: str, timeout: float, materialise: Callable[[str, bytes], str]
) -> Credentials:
    """Run the plugin once and return its credentials; ``materialise`` turns a certificate or
    key into a path ssl can open. Raises CredentialError, with the plugin's name only."""
    if spec.interactive_mode == "Always":
        raise CredentialError(
            "exec plugin needs an interactive terminal (interactiveMode Always)"
        )
    info: Dict[str, Any] = {
        "apiVersion": spec.api_version,
        "kind": "ExecCredential",
        "spec": {"interactive": False},
    }
    if spec.provide_cluster_info:
        info["spec"]["cluster"] = {"server": server}
    env = dict(os.environ)
    env.update(spec.env)
    env["KUBERNETES_EXEC_INFO"] = json.dumps(info)
    name = os.path.basename(spec.command)
    try:
        # Its own session, so a hung plugin is killed with everything it started: a
        # grandchild holding stdout open would otherwise block the read past the timeout.
        proc = subprocess.Popen(
            [spec.command, *spec.args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
    except FileNotFoundError:
        raise CredentialError(f"exec plugin {name}: not found") from None
    except PermissionError:
        raise CredentialError(f"exec plugin {name}: not executable") from None
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)  # the group of the process we started
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.communicate(timeout=2)
        raise CredentialError(
            f"exec plugin {name}: no answer in {timeout:g}s (killed)"
        ) from None
    if proc.returncode != 0:
        # stderr is the plugin's own diagnostics, not the credential: first line only.
        first = stderr.decode("utf-8", "replace").strip().splitlines()[:1]
        raise CredentialError(
            f"exec plugin {name} exited {proc.returncode}"
            + (f": {first[0][:200]}" if first else "")
        )
    return parse_exec(stdout, spec, name, materialise)


def parse_exec(
    stdout: bytes, spec: ExecSpec, name: str, materialise: Callable[[str, bytes], str]
) -> Credentials:
    """The ExecCredential a plugin printed, checked field by field (client-go's
    pkg/client/auth/exec: apiVersion must match the one asked, a certificate needs its key)."""
    try:
        cred = json.loads(stdout.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise CredentialError(f"exec plugin {name}: output is not JSON") from None
    if not isinstance(cred, dict) or cred.get("kind") != "ExecCredential":
        raise CredentialError(f"exec plugin {name}: output is not an ExecCredential")
    if cred.get("apiVersion") != spec.api_version:
        raise CredentialError(
            f"exec plugin {name}: answered {cred.get('apiVersion')!r}, asked {spec.api_version}"
        )
    status = cred.get("status") or {}
    if not isinstance(status, dict):
        raise CredentialError(f"exec plugin {name}: ExecCredential without status")
    out = Credentials()
    token = status.get("token")
    if token:
        if not isinstance(token, str):
            raise CredentialError(f"exec plugin {name}: status.token is not a string")
        out.token = token
    cert, key = status.get("clientCertificateData"), status.get("clientKeyData")
    if bool(cert) != bool(key):
        raise CredentialError(
            f"exec plugin {name}: certificate without key or key without certificate"
        )
    if cert and key:
        if not isinstance(cert, str) or not isinstance(key, str):
            raise CredentialError(f"exec plugin {name}: certificate or key is not a string")
        out.cert_file = materialise("exec-client.crt", _encode(cert))
        out.key_file = materialise("exec-client.key", _encode(key))
        problem = check_pair(out.cert_file, out.key_file)
        if problem:
            raise CredentialError(f"exec plugin {name}: clientCertificateData/"
                                  f"clientKeyData: {problem}")
    if not out.token and not out.cert_file:
        raise CredentialError(
            f"exec plugin {name}: ExecCredential has no token and no certificate"
        )
    if status.get("expirationTimestamp"):
        stamp = status["expirationTimestamp"]
        out.expires_at = parse_rfc3339(stamp) if isinstance(stamp, str) else None
        if out.expires_at is None:
            raise CredentialError(f"exec plugin {name}: unparsable expirationTimestamp")
    return out


def _encode(text: str) -> bytes:
    # JSON "\ud800" decodes to a lone surrogate, which has no UTF-8 form: not a PEM anyway.
    return text.encode("utf-8", "replace")


def parse_rfc3339(text: str) -> Optional[float]:
    try:
        value = text.strip().replace("Z", "+00:00")
        if "." in value:  # fromisoformat on 3.9 wants exactly 3 or 6 fraction digits
            head, rest = value.split(".", 1)
            digits = rest[: len(rest) - len(rest.lstrip("0123456789"))]  # the leading run
            tz = rest[len(digits) :]
            if not digits or tz[:1] not in ("", "+", "-"):
                return None  # RFC 3339: time-secfrac is "." 1*DIGIT, then the offset
            value = f"{head}.{(digits + '000000')[:6]}{tz}"
        parsed = datetime.datetime.fromisoformat(value)
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=datetime.timezone.utc)
        # year 1 at +14:00 is before datetime.min in UTC: OverflowError
        return parsed.timestamp()
    except (ValueError, AttributeError, OverflowError):
        return None
