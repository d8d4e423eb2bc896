"""kubeconfig loading (agent/kube/kubeconfig.py) on hostile files: any text, YAML of the
kubeconfig's shape with any value in any field, YAML alias/timestamp/binary traps, and
ExecCredential answers of any shape. ``load`` raises only KubeconfigError, the exec answer
parser only CredentialError, and nothing the loader wrote outlives ``close()``."""
import atexit
import base64
import json
import os
import shutil
import tempfile
from typing import Any

import yaml
from hypothesis import strategies as st

from agent.kube.credentials import CredentialError, ExecSpec, parse_rfc3339
from agent.kube.kubeconfig import KubeconfigError, load
from tests.fuzz.conftest import deep, expect, quick
from tests.fuzz.strategies import JSON, NASTY, TEXT
from tests.kube_certs import CA

_WORK = tempfile.mkdtemp(prefix="gna-fuzz-kubeconfig-")
atexit.register(shutil.rmtree, _WORK, True)
# The loader's temporary files (where it needs any) go here, so the test can see them all.
_TMP = os.path.join(_WORK, "tmp")
os.mkdir(_TMP, 0o700)
_CA = CA(_WORK)
_CERT, _KEY = _CA.issue("system:node:fuzz")[2:]
B64 = st.one_of(
    st.sampled_from([base64.b64encode(_CERT).decode(), base64.b64encode(_KEY).decode(),
                     base64.b64encode(_CA.pem).decode(), "!!!not base64", "QQ", "é"]),
    st.binary(max_size=40).map(lambda b: base64.b64encode(b).decode()),
    NASTY)


def _maybe(valid: Any) -> Any:
    return st.one_of(valid, valid, JSON)


CLUSTER = st.fixed_dictionaries({}, optional={
    "server": _maybe(st.sampled_from(["https://127.0.0.1:6443", "http://x", "ftp://x", ""])),
    "certificate-authority-data": _maybe(B64),
    "certificate-authority": _maybe(st.sampled_from([_CA.path, "missing.crt", ""])),
    "insecure-skip-tls-verify": _maybe(st.booleans()),
})
EXEC = st.fixed_dictionaries({}, optional={
    "apiVersion": _maybe(st.sampled_from(["client.authentication.k8s.io/v1beta1",
                                          "client.authentication.k8s.io/v1", "v0"])),
    "command": _maybe(st.sampled_from(["aws-iam-authenticator", "./bin/x", "/bin/x"])),
    "args": _maybe(st.lists(NASTY, max_size=3)),
    "env": _maybe(st.lists(st.fixed_dictionaries({}, optional={"name": JSON, "value": JSON}),
                           max_size=2)),
    "interactiveMode": _maybe(st.sampled_from(["Never", "IfAvailable", "Always"])),
    "provideClusterInfo": JSON,
})
USER = st.fixed_dictionaries({}, optional={
    "client-certificate-data": _maybe(B64),
    "client-key-data": _maybe(B64),
    "client-certificate": _maybe(st.sampled_from(["missing.crt", "/nonexistent/x.crt"])),
    "client-key": _maybe(st.sampled_from(["missing.key", "/nonexistent/x.key"])),
    "token": _maybe(NASTY),
    "tokenFile": _maybe(st.sampled_from(["token", "/nonexistent/token"])),
    "exec": _maybe(EXEC),
})
DOC = st.fixed_dictionaries({}, optional={
    "current-context": _maybe(st.sampled_from(["c", "other"])),
    "contexts": _maybe(st.lists(_maybe(st.fixed_dictionaries({}, optional={
        "name": _maybe(st.just("c")),
        "context": _maybe(st.fixed_dictionaries({}, optional={
            "cluster": _maybe(st.just("k")), "user": _maybe(st.just("u"))}))})), max_size=2)),
    "clusters": _maybe(st.lists(_maybe(st.fixed_dictionaries(
        {"name": _maybe(st.just("k"))}, optional={"cluster": _maybe(CLUSTER)})), max_size=2)),
    "users": _maybe(st.lists(_maybe(st.fixed_dictionaries(
        {"name": _maybe(st.just("u"))}, optional={"user": _maybe(USER)})), max_size=2)),
})


def _dump(doc: Any) -> str:
    try:
        return yaml.safe_dump(doc, allow_unicode=True)
    except (yaml.YAMLError, ValueError, TypeError, RecursionError):
        return "{}\n"


TRAPS = st.sampled_from([
    "current-context: !!timestamp 2001-13-45\n",
    "users: !!binary ///\n",
    "a: &a [*a]\ncurrent-context: c\n",
    "[" * 5000,
    "? [a]\n: b\n",
    "<<: 5\n",
    "current-context: c\ncontexts: 5\n",
    "current-context: c\ncontexts: [{name: c, context: {cluster: &k [k, *k]}}]\n",
    "a: &a [x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b]\n"
    "d: &d [*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d]\n"
    "current-context: *e\n",
    b"\xff\xfe not UTF-8\n",
])
# The right skeleton (names that resolve, an https server) with any cluster and user
# section: most of these get as far as materialising key material, then may fail.
SKELETON = st.builds(
    lambda cluster, user: {
        "current-context": "c",
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
        "clusters": [{"name": "k", "cluster": dict(cluster, server="https://127.0.0.1:6443")}],
        "users": [{"name": "u", "user": user}]},
    CLUSTER, USER)
TEXT_FILE = st.one_of(SKELETON.map(_dump), SKELETON.map(_dump), DOC.map(_dump), TRAPS, TEXT,
                      NASTY)
EXEC_STATUS = st.fixed_dictionaries({}, optional={
    "token": _maybe(NASTY),
    "clientCertificateData": _maybe(st.sampled_from([_CERT.decode(), "garbage", ""])),
    "clientKeyData": _maybe(st.sampled_from([_KEY.decode(), "garbage", ""])),
    "expirationTimestamp": _maybe(st.one_of(
        st.sampled_from(["2026-12-01T00:00:00Z", "2026-13-01T00:00:00Z",
                         "2026-12-01T00:00:00.123456789+05:30", "9999-12-31T23:59:59-23:59",
                         "0001-01-01T00:00:00+14:00"]), NASTY)),
})
EXEC_OUT = st.one_of(
    st.fixed_dictionaries({"kind": _maybe(st.just("ExecCredential")),
                           "apiVersion": _maybe(st.just("client.authentication.k8s.io/v1"))},
                          optional={"status": _maybe(EXEC_STATUS)}).map(
        lambda d: json.dumps(d).encode("utf-8", "surrogatepass")),
    st.binary(max_size=40))
CASES = st.tuples(TEXT_FILE, EXEC_OUT, NASTY)
VALID = ("current-context: c\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n"
         "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1'}}]\n"
         "users: [{name: u, user: {token: t}}]\n")


def _leftovers() -> list:
    return os.listdir(_TMP)


def kubeconfig_load(case: Any) -> None:
    text, exec_out, stamp = case
    path = os.path.join(_WORK, "kubeconfig")
    with open(path, "wb") as fh:
        fh.write(text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text)
    saved, tempfile.tempdir = tempfile.tempdir, _TMP
    try:
        try:
            kc = load(path)
        except KubeconfigError:
            kc = None
        else:
            kc.close()
        expect(_leftovers() == [], "files left after load/close", _leftovers())
        with open(path, "w") as fh:
            fh.write(VALID)
        kc = load(path)
        try:
            spec = ExecSpec("client.authentication.k8s.io/v1", "plugin")
            try:
                creds = kc._parse_exec(exec_out, spec, "plugin")
            except CredentialError:
                pass
            else:
                expect(bool(creds.token or creds.cert_file), "credentials without a secret")
        finally:
            kc.close()
        expect(_leftovers() == [], "files left after an exec answer", _leftovers())
        value = parse_rfc3339(stamp)
        expect(value is None or isinstance(value, float), "rfc3339", value)
    finally:
        tempfile.tempdir = saved
        for name in _leftovers():  # so one case's leftovers are not counted again
            shutil.rmtree(os.path.join(_TMP, name), ignore_errors=True)


test_kubeconfig_quick = quick(CASES, kubeconfig_load)
test_kubeconfig_deep = deep("kubeconfig loading", CASES, kubeconfig_load)
