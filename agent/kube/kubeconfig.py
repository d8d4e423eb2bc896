"""kubeconfig loading and credentials, the parts kubelet kubeconfigs use.

Supported (client-go's clientcmd semantics): the current context or a named one; cluster
`server`, `certificate-authority(-data)`, `insecure-skip-tls-verify`; user
`client-certificate(-data)`/`client-key(-data)`, `token`, `tokenFile`, and `exec` credential
plugins (client.authentication.k8s.io/v1beta1 and v1, as the EKS hybrid kubelet kubeconfig
uses aws-iam-authenticator). Relative file paths are relative to the kubeconfig's directory
(clientcmd ResolvePaths). Secrets are never logged nor put in an exception message.

Key material never touches disk: inline data (`*-data` fields, an exec plugin's certificate)
goes into an anonymous memory file (agent/kube/keymaterial.py SecretFiles), released by
``close()``, when a load fails, and when the object is garbage collected. A file the
kubeconfig only names (the kubelet's rotated `kubelet-client-current.pem`) is used where it
is. Credentials and the exec plugin: agent/kube/credentials.py.
"""

import base64
import os
import threading
import time
import weakref
from typing import Any, Dict, Optional

import yaml

from agent.errors import ConfigError
from agent.kube.credentials import (
    EXEC_API_VERSIONS,
    EXPIRY_MARGIN_S,
    CredentialError,
    Credentials,
    ExecSpec,
    parse_exec,
    run_exec,
)
from agent.kube.keymaterial import SecretFiles, check_ca, check_pair
from agent.safeio.bounded import CONFIG_CAP, read_bytes_capped
from agent.safeio.yamlio import safe_load


class KubeconfigError(ConfigError):
    """The kubeconfig is missing or malformed: one line, no secrets. The API callers turn it
    into a verdict line or an `unknown`; a ConfigError (exit 2) should one reach the user."""


def _b64(value: Any, what: str) -> bytes:
    if not isinstance(value, str):
        raise KubeconfigError(f"{what} is not a string")
    try:
        return base64.b64decode(value, validate=False)
    except (ValueError, TypeError):
        raise KubeconfigError(f"{what} is not valid base64") from None


def _text(obj: Dict[str, Any], key: str, what: str, scalars: bool = False) -> Optional[str]:
    """A string field (None when absent or empty). ``scalars``: a YAML number or boolean is
    taken as its text (`token: 12345` is a YAML integer); a list or mapping never is."""
    value = obj.get(key)
    if value is None or value == "":
        return None
    if isinstance(value, str):
        return value
    if scalars and isinstance(value, (int, float)):
        return str(value).lower() if isinstance(value, bool) else str(value)
    raise KubeconfigError(f"{what}: {key} is not a string")


def _named(items: Any, name: str, kind: str, origin: str) -> Dict[str, Any]:
    if items is not None and not isinstance(items, list):
        raise KubeconfigError(f"{origin}: {kind}s is not a list")
    for item in items or []:
        if isinstance(item, dict) and item.get("name") == name:
            body = item.get(kind)
            if isinstance(body, dict):
                return body
            return {}
    raise KubeconfigError(f"{origin}: no {kind} named {name!r}")


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
        self._secrets = SecretFiles()
        # Released even if close() is never called (a caller that drops a failed client).
        self._finalizer = weakref.finalize(self, self._secrets.close)
        self._lock = threading.Lock()
        self._cached: Optional[Credentials] = None
        try:
            self._load(data, context)
        except BaseException:
            self.close()  # a failed load keeps nothing it materialised
            raise

    def _load(self, data: Dict[str, Any], context: Optional[str]) -> None:
        path = self.path
        self._base = os.path.dirname(os.path.abspath(path))
        self.context_name = context or _text(data, "current-context", path) or ""
        if not self.context_name:
            raise KubeconfigError(f"{path}: no current-context and no context named")
        ctx = _named(data.get("contexts"), self.context_name, "context", path)
        where = f"{path}: context {self.context_name!r}"
        cluster_name = _text(ctx, "cluster", where) or ""
        cluster = _named(data.get("clusters"), cluster_name, "cluster", path)
        user_name = _text(ctx, "user", where)
        user = _named(data.get("users"), user_name, "user", path) if user_name else {}
        self.server = (_text(cluster, "server", f"{path}: cluster") or "").rstrip("/")
        if not self.server.startswith("https://") and not self.server.startswith("http://"):
            raise KubeconfigError(f"{path}: cluster has no https:// server")
        self.verify: Any = True
        skip = cluster.get("insecure-skip-tls-verify")
        if skip is not None and not isinstance(skip, bool):
            raise KubeconfigError(f"{path}: cluster: insecure-skip-tls-verify is not a boolean")
        ca_data = _text(cluster, "certificate-authority-data", f"{path}: cluster")
        ca_file = _text(cluster, "certificate-authority", f"{path}: cluster")
        if skip:
            self.verify = False
        elif ca_data:
            self.verify = self._materialise(
                "ca.crt", _b64(ca_data, f"{path}: certificate-authority-data"))
            problem = check_ca(self.verify)
            if problem:
                raise KubeconfigError(f"{path}: certificate-authority-data: {problem}")
        elif ca_file:
            self.verify = self._resolve(ca_file)
        self._static = self._static_credentials(user)
        token_file = _text(user, "tokenFile", f"{path}: user")
        self._token_file = self._resolve(token_file) if token_file else None
        self.exec_spec = self._exec_spec(user.get("exec"))

    # -- files ---------------------------------------------------------------------------
    def _resolve(self, p: str) -> str:
        return p if os.path.isabs(p) else os.path.join(self._base, p)

    def _materialise(self, name: str, content: bytes) -> str:
        """requests/ssl take file paths: inline data becomes one in memory (SecretFiles)."""
        return self._secrets.put(name, content)

    def close(self) -> None:
        """Releases every in-memory (or fallback temporary) copy of key material."""
        self._finalizer()

    def _static_credentials(self, user: Dict[str, Any]) -> Credentials:
        creds = Credentials()
        where = f"{self.path}: user"
        cert_data = _text(user, "client-certificate-data", where)
        key_data = _text(user, "client-key-data", where)
        cert_path = _text(user, "client-certificate", where)
        key_path = _text(user, "client-key", where)
        if cert_data:
            creds.cert_file = self._materialise(
                "client.crt", _b64(cert_data, f"{self.path}: client-certificate-data"))
        elif cert_path:
            creds.cert_file = self._resolve(cert_path)
        if key_data:
            creds.key_file = self._materialise(
                "client.key", _b64(key_data, f"{self.path}: client-key-data"))
        elif key_path:
            creds.key_file = self._resolve(key_path)
        if creds.cert_file and creds.key_file and (cert_data or key_data):
            # Inline material is checked now, so a bad one is a load error naming the field;
            # files only named are read per connection (the kubelet rotates its pair).
            problem = check_pair(creds.cert_file, creds.key_file)
            if problem:
                raise KubeconfigError(
                    f"{self.path}: client-certificate{'-data' if cert_data else ''}/"
                    f"client-key{'-data' if key_data else ''}: {problem}")
        creds.token = _text(user, "token", where, scalars=True)
        return creds

    def _exec_spec(self, spec: Any) -> Optional[ExecSpec]:
        if not spec:
            return None
        if not isinstance(spec, dict) or not spec.get("command"):
            raise KubeconfigError(f"{self.path}: user exec has no command")
        where = f"{self.path}: user exec"
        api = _text(spec, "apiVersion", where) or ""
        if api not in EXEC_API_VERSIONS:
            raise KubeconfigError(
                f"{self.path}: exec apiVersion {api!r} not supported (v1beta1 and v1 are)"
            )
        command = _text(spec, "command", where) or ""
        if os.sep in command and not os.path.isabs(command):
            command = self._resolve(command)  # clientcmd resolves only paths with a slash
        env = {}
        items = spec.get("env") or []
        if not isinstance(items, list):
            raise KubeconfigError(f"{where}: env is not a list")
        for item in items:
            if isinstance(item, dict) and "name" in item:
                name = _text(item, "name", f"{where} env", scalars=True)
                if name:
                    env[name] = _text(item, "value", f"{where} env", scalars=True) or ""
        args = spec.get("args") or []
        if not isinstance(args, list) or not all(
            isinstance(a, (str, int, float)) for a in args
        ):
            raise KubeconfigError(f"{where}: args is not a list of strings")
        mode = _text(spec, "interactiveMode", where) or ""
        if api.endswith("/v1") and not mode:
            raise KubeconfigError(f"{self.path}: exec interactiveMode is required in v1")
        return ExecSpec(
            api_version=api,
            command=command,
            args=[str(a) for a in args],
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
        assert self.exec_spec is not None
        return run_exec(self.exec_spec, self.server, self.exec_timeout, self._materialise)

    def _parse_exec(self, stdout: bytes, spec: ExecSpec, name: str) -> Credentials:
        """A plugin's answer, its certificate kept by this kubeconfig (and released with it)."""
        return parse_exec(stdout, spec, name, self._materialise)


def load(path: str, context: Optional[str] = None, exec_timeout: float = 20.0) -> KubeConfigFile:
    return KubeConfigFile(path, context, exec_timeout)
