"""kubeconfig loading and credentials, the parts kubelet kubeconfigs use.

Supported (client-go's clientcmd semantics): the current context or a named one; cluster
`server`, `certificate-authority(-data)`, `insecure-skip-tls-verify`; user
`client-certificate(-data)`/`client-key(-data)`, `token`, `tokenFile`, and `exec` credential
plugins (client.authentication.k8s.io/v1beta1 and v1, as the EKS hybrid kubelet kubeconfig
uses aws-iam-authenticator). Relative file paths are relative to the kubeconfig's directory
(clientcmd ResolvePaths). Secrets are never logged nor put in an exception message.
"""

import base64
import contextlib
import datetime
import json
import os
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import yaml

from agent.boundedio import CONFIG_CAP, read_bytes_capped
from agent.yamlio import safe_load

EXEC_API_VERSIONS = (
    "client.authentication.k8s.io/v1beta1",
    "client.authentication.k8s.io/v1",
)
# Refresh an exec credential this long before it expires (client-go refreshes on expiry;
# a margin avoids sending a token that lapses in flight).
EXPIRY_MARGIN_S = 60.0


class KubeconfigError(Exception):
    """The kubeconfig is missing or malformed: one line, no secrets."""


class CredentialError(Exception):
    """Credentials could not be obtained (exec plugin failed, hung, or answered garbage)."""


@dataclass
class ExecSpec:
    api_version: str
    command: str
    args: List[str] = field(default_factory=list)
    env: Dict[str, str] = field(default_factory=dict)
    interactive_mode: str = "IfAvailable"
    provide_cluster_info: bool = False


@dataclass
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


def _b64(value: str, what: str) -> bytes:
    try:
        return base64.b64decode(value, validate=False)
    except (ValueError, TypeError):
        raise KubeconfigError(f"{what} is not valid base64") from None


def _named(items: Any, name: str, kind: str, origin: str) -> Dict[str, Any]:
    for item in items or []:
        if isinstance(item, dict) and item.get("name") == name:
            body = item.get(kind)
            if isinstance(body, dict):
                return body
            return {}
    raise KubeconfigError(f"{origin}: no {kind} named {name!r}")


def parse_rfc3339(text: str) -> Optional[float]:
    try:
        value = text.strip().replace("Z", "+00:00")
        if "." in value:  # fromisoformat on 3.9 wants exactly 3 or 6 fraction digits
            head, rest = value.split(".", 1)
            digits = "".join(c for c in rest if c.isdigit())
            tz = rest[len(digits) :]
            value = f"{head}.{(digits + '000000')[:6]}{tz}"
        parsed = datetime.datetime.fromisoformat(value)
    except (ValueError, AttributeError):
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.timezone.utc)
    return parsed.timestamp()


class KubeConfigFile:
    """One resolved context: server, TLS settings, and a credential source."""

    def __init__(self, path: str, context: Optional[str] = None, exec_timeout: float = 20.0):
        self.path = path
        self.exec_timeout = exec_timeout
        try:  # a regular file under the config cap; bounded YAML (depth, aliases, integers)
            data = safe_load(read_bytes_capped(path, CONFIG_CAP).decode("utf-8"))
        except FileNotFoundError:
            raise KubeconfigError(f"{path}: no such file") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise KubeconfigError(f"{path}: unreadable ({exc.__class__.__name__})") from None
        except yaml.YAMLError:
            raise KubeconfigError(f"{path}: not valid YAML") from None
        if not isinstance(data, dict):
            raise KubeconfigError(f"{path}: not a kubeconfig (expected a mapping)")
        self._base = os.path.dirname(os.path.abspath(path))
        self.context_name = context or data.get("current-context") or ""
        if not self.context_name:
            raise KubeconfigError(f"{path}: no current-context and no context named")
        ctx = _named(data.get("contexts"), self.context_name, "context", path)
        cluster = _named(data.get("clusters"), str(ctx.get("cluster", "")), "cluster", path)
        user_name = ctx.get("user")
        user = _named(data.get("users"), str(user_name), "user", path) if user_name else {}
        self.server = str(cluster.get("server") or "").rstrip("/")
        if not self.server.startswith("https://") and not self.server.startswith("http://"):
            raise KubeconfigError(f"{path}: cluster has no https:// server")
        self._tmpdir: Optional[str] = None
        self._lock = threading.Lock()
        self.verify: Any = True
        if cluster.get("insecure-skip-tls-verify"):
            self.verify = False
        elif cluster.get("certificate-authority-data"):
            self.verify = self._materialise(
                "ca.crt",
                _b64(str(cluster["certificate-authority-data"]), "certificate-authority-data"),
            )
        elif cluster.get("certificate-authority"):
            self.verify = self._resolve(str(cluster["certificate-authority"]))
        self._static = self._static_credentials(user)
        self._token_file = self._resolve(str(user["tokenFile"])) if user.get("tokenFile") else None
        self.exec_spec = self._exec_spec(user.get("exec"))
        self._cached: Optional[Credentials] = None

    # -- files ---------------------------------------------------------------------------
    def _resolve(self, p: str) -> str:
        return p if os.path.isabs(p) else os.path.join(self._base, p)

    def _materialise(self, name: str, content: bytes) -> str:
        """requests/ssl take file paths: inline data goes to a private 0700 temp dir."""
        if self._tmpdir is None:
            self._tmpdir = tempfile.mkdtemp(prefix="gpu-node-agent-kube-")
        target = os.path.join(self._tmpdir, name)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(content)
        return target

    def close(self) -> None:
        if self._tmpdir is not None:
            for name in os.listdir(self._tmpdir):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(self._tmpdir, name))
            with contextlib.suppress(OSError):
                os.rmdir(self._tmpdir)
            self._tmpdir = None

    def _static_credentials(self, user: Dict[str, Any]) -> Credentials:
        creds = Credentials()
        if user.get("client-certificate-data"):
            creds.cert_file = self._materialise(
                "client.crt", _b64(str(user["client-certificate-data"]), "client-certificate-data")
            )
        elif user.get("client-certificate"):
            creds.cert_file = self._resolve(str(user["client-certificate"]))
        if user.get("client-key-data"):
            creds.key_file = self._materialise(
                "client.key", _b64(str(user["client-key-data"]), "client-key-data")
            )
        elif user.get("client-key"):
            creds.key_file = self._resolve(str(user["client-key"]))
        if user.get("token"):
            creds.token = str(user["token"])
        return creds

    def _exec_spec(self, spec: Any) -> Optional[ExecSpec]:
        if not spec:
            return None
        if not isinstance(spec, dict) or not spec.get("command"):
            raise KubeconfigError(f"{self.path}: user exec has no command")
        api = str(spec.get("apiVersion") or "")
        if api not in EXEC_API_VERSIONS:
            raise KubeconfigError(
                f"{self.path}: exec apiVersion {api!r} not supported (v1beta1 and v1 are)"
            )
        command = str(spec["command"])
        if os.sep in command and not os.path.isabs(command):
            command = self._resolve(command)  # clientcmd resolves only paths with a slash
        env = {}
        for item in spec.get("env") or []:
            if isinstance(item, dict) and "name" in item:
                env[str(item["name"])] = str(item.get("value", ""))
        mode = str(spec.get("interactiveMode") or "")
        if api.endswith("/v1") and not mode:
            raise KubeconfigError(f"{self.path}: exec interactiveMode is required in v1")
        return ExecSpec(
            api_version=api,
            command=command,
            args=[str(a) for a in spec.get("args") or []],
            env=env,
            interactive_mode=mode or "IfAvailable",
            provide_cluster_info=bool(spec.get("provideClusterInfo")),
        )

    # -- credentials ---------------------------------------------------------------------
    def credentials(self, now: Optional[float] = None) -> Credentials:
        """Current credentials; an exec credential is cached until shortly before it expires."""
        now = time.time() if now is None else now
        creds = Credentials(self._static.token, self._static.cert_file, self._static.key_file)
        if self._token_file is not None:
            try:
                with open(self._token_file, encoding="utf-8") as fh:
                    creds.token = fh.read().strip()  # re-read each time: it is rotated
            except OSError:
                raise CredentialError(f"tokenFile {self._token_file} unreadable") from None
        if self.exec_spec is None:
            return creds
        with self._lock:
            cached = self._cached
            if cached is None or (
                cached.expires_at is not None and now >= cached.expires_at - EXPIRY_MARGIN_S
            ):
                cached = self._cached = self._run_exec()
        return Credentials(
            cached.token or creds.token,
            cached.cert_file or creds.cert_file,
            cached.key_file or creds.key_file,
            cached.expires_at,
        )

    def invalidate(self) -> None:
        """After a 401: the next credentials() call runs the exec plugin again."""
        with self._lock:
            self._cached = None

    def _run_exec(self) -> Credentials:
        spec = self.exec_spec
        assert spec is not None
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
            info["spec"]["cluster"] = {"server": self.server}
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
            stdout, stderr = proc.communicate(timeout=self.exec_timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)  # the group of the process we started
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.communicate(timeout=2)
            raise CredentialError(
                f"exec plugin {name}: no answer in {self.exec_timeout:g}s (killed)"
            ) from None
        if proc.returncode != 0:
            # stderr is the plugin's own diagnostics, not the credential: first line only.
            first = stderr.decode("utf-8", "replace").strip().splitlines()[:1]
            raise CredentialError(
                f"exec plugin {name} exited {proc.returncode}"
                + (f": {first[0][:200]}" if first else "")
            )
        return self._parse_exec(stdout, spec, name)

    def _parse_exec(self, stdout: bytes, spec: ExecSpec, name: str) -> Credentials:
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
        if status.get("token"):
            out.token = str(status["token"])
        cert, key = status.get("clientCertificateData"), status.get("clientKeyData")
        if bool(cert) != bool(key):
            raise CredentialError(
                f"exec plugin {name}: certificate without key or key without certificate"
            )
        if cert and key:
            out.cert_file = self._materialise("exec-client.crt", str(cert).encode())
            out.key_file = self._materialise("exec-client.key", str(key).encode())
        if not out.token and not out.cert_file:
            raise CredentialError(
                f"exec plugin {name}: ExecCredential has no token and no certificate"
            )
        if status.get("expirationTimestamp"):
            out.expires_at = parse_rfc3339(str(status["expirationTimestamp"]))
            if out.expires_at is None:
                raise CredentialError(f"exec plugin {name}: unparsable expirationTimestamp")
        return out


def load(path: str, context: Optional[str] = None, exec_timeout: float = 20.0) -> KubeConfigFile:
    return KubeConfigFile(path, context, exec_timeout)


def client_cert_cn(pem: bytes) -> Optional[str]:
    """The subject CN of the first certificate in ``pem`` (kubelet: system:node:<name>).

    Uses `cryptography` when installed (it is not a dependency of the agent); otherwise the
    decoder CPython's own ssl tests use (`_ssl._test_decode_cert`, present 3.9-3.13), which
    needs a file. The kubelet's -current.pem holds the key too; only the certificate is kept.
    """
    start = pem.find(b"-----BEGIN CERTIFICATE-----")
    end = pem.find(b"-----END CERTIFICATE-----", start)
    if start < 0 or end < 0:
        return None
    cert_pem = pem[start : end + len(b"-----END CERTIFICATE-----")] + b"\n"
    try:
        from cryptography import x509
        from cryptography.x509.oid import NameOID
    except ImportError:
        return _cn_with_ssl(cert_pem)
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    except (ValueError, TypeError):
        return None
    return str(names[0].value) if names else None


def _cn_with_ssl(cert_pem: bytes) -> Optional[str]:
    import ssl

    decode = getattr(getattr(ssl, "_ssl", None), "_test_decode_cert", None)
    if decode is None:
        return None
    fd, path = tempfile.mkstemp(prefix="gpu-node-agent-cert-")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(cert_pem)
        info = decode(path)
    except (OSError, ValueError, ssl.SSLError):
        return None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
    for rdn in info.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None
