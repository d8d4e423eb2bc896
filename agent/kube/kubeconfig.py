"""kubeconfig loading and credentials, the parts kubelet kubeconfigs use.

Supported (client-go's clientcmd semantics): the current context or a named one; cluster
`server`, `certificate-authority(-data)`, `insecure-skip-tls-verify`; user
`client-certificate(-data)`/`client-key(-data)`, `token`, `tokenFile`, and `exec` credential
plugins (client.authentication.k8s.io/v1beta1 and v1, as the EKS hybrid kubelet kubeconfig
uses aws-iam-authenticator). Relative file paths are relative to the kubeconfig's directory
(clientcmd ResolvePaths). Secrets are never logged nor put in an exception message.

Key material never touches disk: requests and ssl take only file *paths* for a client
certificate, its key and a CA bundle, so inline data (`*-data` fields, an exec plugin's
certificate) goes into an anonymous memory file (memfd_create(2)) and is handed over as
``/proc/self/fd/N``; it is released by ``close()``, when a load fails, and when the object is
garbage collected. Only where memfd_create is unavailable (not Linux, a kernel before 3.17,
a seccomp filter that refuses it) does it go to a 0700 temporary directory, removed on the
same paths. A file the kubeconfig only names (the kubelet's rotated
`kubelet-client-current.pem`) is used where it is.
"""

import base64
import contextlib
import datetime
import errno
import json
import os
import signal
import ssl
import subprocess
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import yaml

from agent.safeio.bounded import CONFIG_CAP, read_bytes_capped
from agent.safeio.yamlio import safe_load

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


class SecretFiles:
    """Key material as paths ssl can open, kept off disk (the module docstring says how).

    ``put`` returns a path; the newest ``KEEP`` versions under one name stay open (an exec
    credential refreshed on one thread while a request on another still opens the previous
    path), older ones are released; ``close`` releases everything and is idempotent.
    """

    KEEP = 2

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._memfd = hasattr(os, "memfd_create")
        self._fds: Dict[str, List[int]] = {}
        self._files: Dict[str, List[str]] = {}
        self._tmpdir: Optional[str] = None
        self._serial = 0

    @property
    def in_memory(self) -> bool:
        """True while nothing has gone to the temporary-directory fallback."""
        return self._tmpdir is None

    def put(self, name: str, content: bytes) -> str:
        with self._lock:
            if self._memfd:
                path = self._put_memfd(name, content)
                if path is not None:
                    return path
            return self._put_file(name, content)

    def _put_memfd(self, name: str, content: bytes) -> Optional[str]:
        flags = getattr(os, "MFD_CLOEXEC", 1) | getattr(os, "MFD_ALLOW_SEALING", 2)
        try:
            fd = os.memfd_create(f"gpu-node-agent-{name}", flags)
        except OSError:  # ENOSYS (kernel < 3.17), EPERM/EACCES (seccomp): the fallback
            self._memfd = False
            return None
        path = f"/proc/self/fd/{fd}"
        try:
            _write_all(fd, content)
            _seal(fd)
            # The path is how ssl reaches it: without procfs (a chroot) it is useless.
            os.close(os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)))
        except OSError:
            os.close(fd)
            self._memfd = False
            return None
        except BaseException:
            os.close(fd)
            raise
        versions = self._fds.setdefault(name, [])
        versions.append(fd)
        while len(versions) > self.KEEP:
            with contextlib.suppress(OSError):
                os.close(versions.pop(0))
        return path

    def _put_file(self, name: str, content: bytes) -> str:
        if self._tmpdir is None:
            self._tmpdir = tempfile.mkdtemp(prefix="gpu-node-agent-kube-")  # mode 0700
        self._serial += 1
        target = os.path.join(self._tmpdir, f"{name}.{self._serial}")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(target, flags | getattr(os, "O_CLOEXEC", 0), 0o600)
        try:
            _write_all(fd, content)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(target)
            raise
        os.close(fd)
        versions = self._files.setdefault(name, [])
        versions.append(target)
        while len(versions) > self.KEEP:
            with contextlib.suppress(OSError):
                os.unlink(versions.pop(0))
        return target

    def close(self) -> None:
        with self._lock:
            for versions in self._fds.values():
                for fd in versions:
                    with contextlib.suppress(OSError):
                        os.close(fd)
            self._fds.clear()
            self._files.clear()
            if self._tmpdir is not None:
                for entry in os.listdir(self._tmpdir):
                    with contextlib.suppress(OSError):
                        os.unlink(os.path.join(self._tmpdir, entry))
                with contextlib.suppress(OSError):
                    os.rmdir(self._tmpdir)
                self._tmpdir = None


def _write_all(fd: int, content: bytes) -> None:
    view = memoryview(content)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(errno.EIO, "short write")
        view = view[written:]


def _seal(fd: int) -> None:
    """No further writes, growth or shrinking (fcntl(2) "File Sealing"); best effort."""
    try:
        import fcntl

        seals = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    except (ImportError, AttributeError, OSError):
        pass


def _refuse_password() -> bytes:
    # An encrypted key has no place in a kubeconfig (clientcmd cannot decrypt one either);
    # without this callback OpenSSL would prompt on the terminal.
    raise ValueError("the client key is encrypted")


def _check_pair(cert: str, key: str) -> Optional[str]:
    """Why ssl cannot use this certificate and key (as requests will), or None."""
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(cert, key, _refuse_password)
    except (ssl.SSLError, ValueError) as exc:
        return f"not a usable certificate and key ({getattr(exc, 'reason', None) or 'invalid'})"
    except OSError as exc:
        return f"cannot read it ({exc.__class__.__name__})"
    return None


def _check_ca(path: str) -> Optional[str]:
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cafile=path)
    except ssl.SSLError as exc:
        return f"no usable CA certificate ({exc.reason or 'invalid'})"
    except OSError as exc:
        return f"cannot read it ({exc.__class__.__name__})"
    return None


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
            problem = _check_ca(self.verify)
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
            problem = _check_pair(creds.cert_file, creds.key_file)
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
            out.cert_file = self._materialise("exec-client.crt", _encode(cert))
            out.key_file = self._materialise("exec-client.key", _encode(key))
            problem = _check_pair(out.cert_file, out.key_file)
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
    except Exception:  # noqa: BLE001 - any bytes: a parse failure of any kind is "no CN"
        return None
    value = names[0].value if names else None
    return value if isinstance(value, str) else None


def _cn_with_ssl(cert_pem: bytes) -> Optional[str]:
    decode = getattr(getattr(ssl, "_ssl", None), "_test_decode_cert", None)
    if decode is None:
        return None
    files = SecretFiles()
    try:
        info = decode(files.put("cert.pem", cert_pem))
    except (OSError, ValueError, ssl.SSLError):
        return None
    finally:
        files.close()
    for rdn in info.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None
