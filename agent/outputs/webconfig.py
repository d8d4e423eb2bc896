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
import hmac
import os
import ssl
import threading
import time
from collections import OrderedDict
from typing import Callable, Dict, Literal, Optional

from agent.errors import ConfigError
from agent.outputs.ratelimit import TokenBucket
from agent.safeio.bounded import CONFIG_CAP, read_bytes_capped
from agent.safeio.schema import Record, ValidationError
from agent.safeio.yamlio import YamlError, safe_load

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
# Basic auth costs one bcrypt per distinct (user, password): ~50 ms of a core at cost 10. Verdicts
# (good and bad) are cached by a keyed hash, and the bcrypt checks that are not cached are
# rate-limited per client address and, for addresses that never authenticated, in all, so a
# flood of wrong passwords cannot keep the host's cores busy (OWASP Authentication Cheat
# Sheet, "Protect against automated attacks"; exporter-toolkit caches verdicts too).
AUTH_CACHE_MAX = 1024
ADDR_BURST, ADDR_REFILL_S = 5, 2.0  # per address: 5 uncached checks, then one per 2 s
GLOBAL_BURST, GLOBAL_REFILL_S = 20, 0.5  # addresses with no success yet: 20, then 2 per s
MAX_TRACKED = 4096  # addresses with a bucket (oldest forgotten first)
AUTH_OK, AUTH_DENIED, AUTH_LIMITED = "ok", "denied", "limited"
_DUMMY: Dict[str, bytes] = {}


def _dummy_hash() -> bytes:
    """A bcrypt hash of a random password: unknown users still pay one bcrypt check, so
    response time does not tell which user names exist (exporter-toolkit does the same)."""
    import bcrypt

    if "h" not in _DUMMY:
        _DUMMY["h"] = bcrypt.hashpw(os.urandom(16).hex().encode(), bcrypt.gensalt(10))
    return _DUMMY["h"]


class AuthLimiter:
    """Token buckets for uncached password checks: one per address, one for all addresses
    that have not authenticated yet (a known scraper is never starved by a flood)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._addr: OrderedDict[str, TokenBucket] = OrderedDict()
        self._known: OrderedDict[str, bool] = OrderedDict()
        self._global: Optional[TokenBucket] = None
        self._lock = threading.Lock()

    def allow(self, addr: Optional[str]) -> bool:
        now = self.clock()
        key = addr or "?"
        with self._lock:
            bucket = self._addr.pop(key, None) or TokenBucket(ADDR_BURST, ADDR_REFILL_S, now)
            self._addr[key] = bucket
            while len(self._addr) > MAX_TRACKED:
                self._addr.popitem(last=False)
            if not bucket.take(now):
                return False
            if key in self._known:
                return True
            if self._global is None:
                self._global = TokenBucket(GLOBAL_BURST, GLOBAL_REFILL_S, now)
            if not self._global.take(now):
                bucket.give_back()  # not this address's fault
                return False
            return True

    def succeeded(self, addr: Optional[str]) -> None:
        key = addr or "?"
        with self._lock:
            bucket = self._addr.get(key)
            if bucket is not None:  # a good password costs the address nothing
                bucket.give_back()
            if key not in self._known and self._global is not None:
                self._global.give_back()
            self._known[key] = True
            self._known.move_to_end(key)
            while len(self._known) > 256:
                self._known.popitem(last=False)


class WebConfigError(ConfigError):
    """One line: file, field, problem. A ConfigError: `run` refuses it at start with exit 2."""


class _Strict(Record):
    """Unknown keys are refused."""


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
        self._verdicts: OrderedDict[bytes, bool] = OrderedDict()
        self._cache_key = os.urandom(32)  # verdicts are keyed by HMAC, never by the password
        self._lock = threading.Lock()
        self._bcrypt_lock = threading.Lock()  # one bcrypt at a time: at most one core
        self.limiter = AuthLimiter()
        self.bcrypt_checks = 0  # how many bcrypt verifications ran (tests, bench)

    @property
    def auth_required(self) -> bool:
        return bool(self.users)

    def check_authorization(self, header: Optional[str], client: Optional[str] = None) -> bool:
        """True when basic auth is off, or the Authorization header carries a valid user."""
        return self.authorize(header, client) == AUTH_OK

    def authorize(self, header: Optional[str], client: Optional[str] = None) -> str:
        """AUTH_OK, AUTH_DENIED, or AUTH_LIMITED (an uncached check refused by the rate
        limit for ``client``, the peer address: answer 429 without running bcrypt)."""
        if not self.users:
            return AUTH_OK
        if not header or not header.startswith("Basic "):
            return AUTH_DENIED
        try:
            user, _, password = base64.b64decode(header[6:].strip(), validate=True).decode(
                "utf-8"
            ).partition(":")
        except (ValueError, UnicodeDecodeError):
            return AUTH_DENIED
        hashed = self.users.get(user)
        key = hmac.new(self._cache_key, b"\0".join([user.encode(), password.encode()]),
                       hashlib.sha256).digest()
        with self._lock:
            cached = self._verdicts.get(key)
            if cached is not None:
                self._verdicts.move_to_end(key)
        if cached is not None:
            if cached:
                self.limiter.succeeded(client)
            return AUTH_OK if cached else AUTH_DENIED
        if not self.limiter.allow(client):
            return AUTH_LIMITED
        import bcrypt

        with self._bcrypt_lock:
            self.bcrypt_checks += 1
            try:
                ok = bcrypt.checkpw(password.encode("utf-8"), hashed or _dummy_hash())
            except ValueError:  # a malformed hash in the file: nobody gets in with it
                ok = False
        ok = ok and hashed is not None
        with self._lock:
            self._verdicts[key] = ok
            while len(self._verdicts) > AUTH_CACHE_MAX:
                self._verdicts.popitem(last=False)
        if ok:
            self.limiter.succeeded(client)
        return AUTH_OK if ok else AUTH_DENIED


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
    try:  # capped: a reload must never read a huge file into the agent's memory
        data = safe_load(read_bytes_capped(path, CONFIG_CAP).decode("utf-8"))  # bounded
    except YamlError as exc:  # any YAML error, or a limit (depth, aliases, integer length)
        raise WebConfigError(f"{path}: invalid YAML ({exc})") from None
    except (OSError, UnicodeDecodeError) as exc:
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
