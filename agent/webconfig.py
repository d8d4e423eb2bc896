"""The exporter-toolkit web-config file: TLS and basic auth for the metrics endpoint.

Same format as node_exporter's --web.config.file (prometheus/exporter-toolkit
docs/web-configuration.md): ``tls_server_config`` (cert_file, key_file, client_auth_type,
client_ca_file, min_version, max_version), ``http_server_config.headers`` and
``basic_auth_users`` (user: bcrypt hash). Relative file names are relative to the web-config
file's directory, as exporter-toolkit resolves them. Unknown keys are errors (exporter-toolkit
parses strictly too); options Python's ssl module cannot honour (cipher_suites,
curve_preferences, RequestClientCert) are refused rather than silently ignored.
"""
import base64
import hashlib
import os
import ssl
import threading
from typing import Dict, Literal, Optional

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
# exporter-toolkit allows only these response headers to be set.
ALLOWED_HEADERS = (
    "Strict-Transport-Security",
    "X-Content-Type-Options",
    "X-Frame-Options",
    "X-XSS-Protection",
    "Content-Security-Policy",
)
AUTH_CACHE_MAX = 256
_DUMMY: Dict[str, bytes] = {}


def _dummy_hash() -> bytes:
    """A bcrypt hash of a random password: unknown users still pay one bcrypt check, so
    response time does not tell which user names exist (exporter-toolkit does the same)."""
    import bcrypt

    if "h" not in _DUMMY:
        _DUMMY["h"] = bcrypt.hashpw(os.urandom(16).hex().encode(), bcrypt.gensalt(10))
    return _DUMMY["h"]


class WebConfigError(Exception):
    """One line: file, field, problem."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TlsServerConfig(_Strict):
    cert_file: str
    key_file: str
    client_auth_type: Literal[
        "NoClientCert", "VerifyClientCertIfGiven", "RequireAndVerifyClientCert"
    ] = "NoClientCert"
    client_ca_file: Optional[str] = None
    min_version: Literal["TLS10", "TLS11", "TLS12", "TLS13"] = "TLS12"
    max_version: Optional[Literal["TLS10", "TLS11", "TLS12", "TLS13"]] = None


class HttpServerConfig(_Strict):
    headers: Dict[str, str] = {}
    http2: bool = True  # accepted for compatibility; this server speaks HTTP/1.1 only


class WebConfigModel(_Strict):
    tls_server_config: Optional[TlsServerConfig] = None
    http_server_config: HttpServerConfig = HttpServerConfig()
    basic_auth_users: Dict[str, str] = {}


class WebConfig:
    """A validated web config: an SSLContext (or None) and a basic-auth verifier."""

    def __init__(self, model: WebConfigModel, base_dir: str) -> None:
        self.model = model
        self.ssl_context: Optional[ssl.SSLContext] = None
        if model.tls_server_config is not None:
            self.ssl_context = _ssl_context(model.tls_server_config, base_dir)
        bad = [h for h in model.http_server_config.headers if h not in ALLOWED_HEADERS]
        if bad:
            raise ValueError(f"http_server_config.headers: {bad[0]} may not be set")
        self.headers = dict(model.http_server_config.headers)
        self.users = {u: h.encode("utf-8") for u, h in model.basic_auth_users.items()}
        for user, hashed in self.users.items():
            if not hashed.startswith((b"$2a$", b"$2b$", b"$2y$")):
                raise ValueError(f"basic_auth_users.{user}: not a bcrypt hash")
        self._ok_cache: Dict[bytes, bool] = {}
        self._lock = threading.Lock()

    @property
    def auth_required(self) -> bool:
        return bool(self.users)

    def check_authorization(self, header: Optional[str]) -> bool:
        """True when basic auth is off, or the Authorization header carries a valid user."""
        if not self.users:
            return True
        if not header or not header.startswith("Basic "):
            return False
        try:
            user, _, password = base64.b64decode(header[6:].strip(), validate=True).decode(
                "utf-8"
            ).partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        import bcrypt

        hashed = self.users.get(user)
        # bcrypt costs ~50 ms at cost 10; successful checks are cached by a digest of
        # (user, hash, password) so a scrape every 15 s does not pay it each time.
        key = hashlib.sha256(b"\0".join([user.encode(), hashed or b"", password.encode()])).digest()
        with self._lock:
            if key in self._ok_cache:
                return True
        try:
            ok = bcrypt.checkpw(password.encode("utf-8"), hashed or _dummy_hash())
        except ValueError:  # a malformed hash in the file: nobody gets in with it
            ok = False
        ok = ok and hashed is not None
        if ok:
            with self._lock:
                if len(self._ok_cache) >= AUTH_CACHE_MAX:
                    self._ok_cache.clear()
                self._ok_cache[key] = True
        return ok


def _ssl_context(tls: TlsServerConfig, base_dir: str) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = TLS_VERSIONS[tls.min_version]
    if tls.max_version:
        ctx.maximum_version = TLS_VERSIONS[tls.max_version]
    cert, key = _rel(tls.cert_file, base_dir), _rel(tls.key_file, base_dir)
    try:
        ctx.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"tls_server_config: cannot load {cert} / {key}: {exc}") from None
    ctx.verify_mode = CLIENT_AUTH[tls.client_auth_type]
    if tls.client_auth_type != "NoClientCert":
        if not tls.client_ca_file:
            raise ValueError(
                f"tls_server_config: client_ca_file is needed for {tls.client_auth_type}"
            )
        ctx.load_verify_locations(_rel(tls.client_ca_file, base_dir))
    return ctx


def _rel(path: str, base_dir: str) -> str:
    return path if os.path.isabs(path) else os.path.join(base_dir, path)


def load_web_config(path: str) -> WebConfig:
    """Parse and validate a web-config file; WebConfigError (one line) when it is not usable."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except (OSError, yaml.YAMLError, UnicodeDecodeError) as exc:
        raise WebConfigError(f"{path}: {type(exc).__name__}: {str(exc).splitlines()[0]}") from None
    try:
        model = WebConfigModel.model_validate(data or {})
        return WebConfig(model, os.path.dirname(os.path.abspath(path)))
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err.get("loc", ())) or "(top level)"
        raise WebConfigError(f"{path}: field '{loc}': {err.get('msg', 'invalid')}") from None
    except (ValueError, ssl.SSLError) as exc:
        raise WebConfigError(f"{path}: {exc}") from None
