"""The metrics endpoint and its web config (exporter-toolkit format): cached bytes, gzip,
basic auth with real bcrypt hashes, TLS with a certificate made by openssl, strict parsing."""
import base64
import gzip
import http.client
import shutil
import ssl
import subprocess

import bcrypt
import pytest

from agent.outputs.metrics_server import MetricsServer, parse_listen_address
from agent.outputs.webconfig import WebConfigError, load_web_config


def make_cert(directory):
    """A self-signed EC certificate for 127.0.0.1 (openssl(1), Debian's)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1", "-addext",
         "subjectAltName=IP:127.0.0.1", "-keyout", str(directory / "tls.key"),
         "-out", str(directory / "tls.crt")], check=True, capture_output=True, timeout=30)
    return directory / "tls.crt", directory / "tls.key"


def hashed(password: str) -> str:
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(4)).decode()  # cost 4: fast tests


def _get(port, path="/metrics", headers=None, context=None):
    if context is None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    else:
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=5, context=context)
    try:
        conn.request("GET", path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def _basic(user, password):
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


@pytest.fixture
def server_factory():
    started = []

    def make(web=None, body=b"a_metric 1\n"):
        srv = MetricsServer("127.0.0.1:0", web, body)
        srv.start()
        started.append(srv)
        return srv

    yield make
    for srv in started:
        srv.stop()


def test_serves_published_bytes_plain_and_gzip(server_factory):
    srv = server_factory()
    status, headers, body = _get(srv.port)
    assert status == 200 and body == b"a_metric 1\n"
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    srv.publish(b"b_metric 2\n")
    status, headers, body = _get(srv.port, headers={"Accept-Encoding": "gzip"})
    assert headers.get("Content-Encoding") == "gzip" and gzip.decompress(body) == b"b_metric 2\n"
    assert _get(srv.port, "/nope")[0] == 404
    assert _get(srv.port, "/-/healthy")[0] == 200


def test_keep_alive_serves_several_requests_on_one_connection(server_factory):
    srv = server_factory()
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=5)
    try:
        for _ in range(3):
            conn.request("GET", "/metrics")
            resp = conn.getresponse()
            assert resp.status == 200 and resp.read() == b"a_metric 1\n"
    finally:
        conn.close()


def test_basic_auth(tmp_path, server_factory):
    cfg = tmp_path / "web.yml"
    cfg.write_text(f"basic_auth_users:\n  prom: '{hashed('s3cret')}'\n")
    srv = server_factory(load_web_config(str(cfg)))
    assert _get(srv.port)[0] == 401
    status, headers, _ = _get(srv.port, headers=_basic("prom", "wrong"))
    assert status == 401 and headers["WWW-Authenticate"].startswith("Basic")
    assert _get(srv.port, headers=_basic("nobody", "s3cret"))[0] == 401
    assert _get(srv.port, headers=_basic("prom", "s3cret"))[0] == 200
    assert _get(srv.port, headers=_basic("prom", "s3cret"))[0] == 200  # cached path
    assert _get(srv.port, headers={"Authorization": "Basic !!notb64"})[0] == 401


def test_tls_with_relative_paths_and_reload(tmp_path, server_factory):
    make_cert(tmp_path)
    cfg = tmp_path / "web.yml"
    cfg.write_text("tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n"
                   "http_server_config:\n  headers:\n    X-Frame-Options: deny\n")
    srv = server_factory(load_web_config(str(cfg)))
    ctx = ssl.create_default_context(cafile=str(tmp_path / "tls.crt"))
    status, headers, body = _get(srv.port, context=ctx)
    assert status == 200 and body == b"a_metric 1\n" and headers["X-Frame-Options"] == "deny"
    with pytest.raises((ConnectionError, http.client.HTTPException, OSError)):
        _get(srv.port)  # plain HTTP to the TLS port: dropped, and the server lives on
    assert _get(srv.port, context=ctx)[0] == 200
    srv.set_web_config(None)  # SIGHUP with TLS removed: same port, plain now
    assert _get(srv.port)[0] == 200


@pytest.mark.parametrize("text, needle", [
    ("basic_auth_users:\n  u: plaintext\n", "not a bcrypt hash"),
    ("tls_server_config:\n  cert_file: a\n  key_file: b\n  cipher_suites: [X]\n", "cipher_suites"),
    ("tls_server_config:\n  cert_file: /nonexistent.crt\n  key_file: /nonexistent.key\n",
     "cannot load"),
    ("basic_auth_user:\n  u: x\n", "basic_auth_user"),
    ("tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: RequestClientCert\n",
     "client_auth_type"),
    ("http_server_config:\n  headers:\n    Server: me\n", "may not be set"),
    ("[unclosed\n", "invalid YAML"),
])
def test_bad_web_configs_are_one_line_errors(tmp_path, text, needle):
    cfg = tmp_path / "web.yml"
    cfg.write_text(text)
    with pytest.raises(WebConfigError) as err:
        load_web_config(str(cfg))
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_listen_address_forms():
    assert parse_listen_address(":9845") == ("0.0.0.0", 9845)
    assert parse_listen_address("[::1]:9") == ("::1", 9)
    assert parse_listen_address("127.0.0.1:0") == ("127.0.0.1", 0)
    with pytest.raises(ValueError):
        parse_listen_address("localhost")
