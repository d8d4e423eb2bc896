"""Key material from a kubeconfig never touches disk (agent/kube/keymaterial.py SecretFiles).

Inline `*-data` and an exec plugin's certificate are held in memfd_create(2) files and
handed to requests/ssl as /proc/self/fd/N; where memfd is unavailable they go to a 0700
temporary directory. Either way nothing is left after a failed load (bad certificate, bad
key, missing file, an error after the CA was materialised), after close(), or after the
object is garbage collected. The temporary directory is private to each test, so a scan of
it for the canary key's bytes sees everything the loader could have written.
"""
import base64
import errno
import gc
import json
import os
import tempfile

import pytest

from agent.kube.client import KubeClient
from agent.kube.credentials import CredentialError, ExecSpec
from agent.kube.keymaterial import SecretFiles
from agent.kube.kubeconfig import KubeconfigError, load
from tests.kube_double import KubeDouble, kubeconfig_yaml

NODE = "gpu-host-1"
MEMFD_PREFIX = "/memfd:gpu-node-agent-"


@pytest.fixture
def double(tmp_path):
    os.makedirs(tmp_path / "double")
    d = KubeDouble(str(tmp_path / "double")).start()
    d.add_node(NODE)
    yield d
    d.stop()


@pytest.fixture(params=["memfd", "tempdir-fallback"])
def mode(request, monkeypatch):
    if request.param == "tempdir-fallback":
        def refused(*_a, **_k):
            raise OSError(errno.ENOSYS, "memfd_create refused (test)")
        monkeypatch.setattr(os, "memfd_create", refused, raising=False)
    elif not hasattr(os, "memfd_create"):
        pytest.fail("this platform has no os.memfd_create (Linux, Python >= 3.8 expected)")
    return request.param


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """TMPDIR for the code under test: everything tempfile creates lands here."""
    path = tmp_path / "tmp"
    path.mkdir(mode=0o700)
    monkeypatch.setenv("TMPDIR", str(path))
    monkeypatch.setattr(tempfile, "tempdir", str(path))
    return path


def files_holding(root, needles):
    """Every file under root whose bytes contain one of needles."""
    hits = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            full = os.path.join(dirpath, name)
            with open(full, "rb") as fh:
                data = fh.read()
            if any(n in data for n in needles):
                hits.append(full)
    return hits


def open_memfds():
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(MEMFD_PREFIX):
            out.append(target)
    return out


def canary(key_pem):
    """The key's body (base64 between the PEM lines) and its kubeconfig form."""
    body = b"".join(key_pem.splitlines()[1:-1])
    return [body[:48], base64.b64encode(key_pem)[:48]]


def write(tmp_path, double, user, ca_data=True):
    path = tmp_path / "kubeconfig"
    path.write_text(kubeconfig_yaml(double.url, user=user,
                                    ca_data=double.ca.pem if ca_data else None,
                                    ca_path=None if ca_data else double.ca.path))
    return str(path)


def inline(cert_pem, key_pem):
    return {"client-certificate-data": base64.b64encode(cert_pem).decode(),
            "client-key-data": base64.b64encode(key_pem).decode()}


def assert_nothing_left(private_tmp, needles, before_memfds):
    assert files_holding(private_tmp, needles) == []
    assert os.listdir(private_tmp) == []
    assert open_memfds() == before_memfds


def test_success_uses_memory_then_releases_it(tmp_path, double, private_tmp, mode):
    _, _, cert_pem, key_pem = double.client_cert(NODE)
    needles = canary(key_pem)
    before = open_memfds()
    kc = load(write(tmp_path, double, inline(cert_pem, key_pem)))
    creds = kc.credentials()
    if mode == "memfd":
        assert creds.key_file.startswith("/proc/self/fd/")
        assert os.readlink(creds.key_file) == "/memfd:gpu-node-agent-client.key (deleted)"
        assert os.listdir(private_tmp) == []  # the key never touched disk
        with open(creds.key_file, "rb") as fh:
            assert fh.read() == key_pem
    else:
        (tmpdir,) = os.listdir(private_tmp)
        assert oct(os.stat(private_tmp / tmpdir).st_mode & 0o777) == "0o700"
        assert oct(os.stat(creds.key_file).st_mode & 0o777) == "0o600"
        assert files_holding(private_tmp, needles) == [creds.key_file]
    # TLS to the HTTPS API double with that client certificate: the identity arrives.
    client = KubeClient(kc, timeout=5)
    assert client.get_node(NODE)["metadata"]["name"] == NODE
    assert double.log[-1]["user"] == f"system:node:{NODE}"
    client.close()
    assert_nothing_left(private_tmp, needles, before)


def _bad_cert(cert_pem, key_pem, tmp_path):
    return {"client-certificate-data": base64.b64encode(b"-----BEGIN CERTIFICATE-----\n"
                                                        b"AAAA\n-----END CERTIFICATE-----\n").decode(),
            "client-key-data": base64.b64encode(key_pem).decode()}


def _bad_key(cert_pem, key_pem, tmp_path):
    return {"client-certificate-data": base64.b64encode(cert_pem).decode(),
            "client-key-data": base64.b64encode(key_pem[: len(key_pem) // 2]).decode()}


def _missing_file(cert_pem, key_pem, tmp_path):
    return {"client-certificate": str(tmp_path / "missing.crt"),
            "client-key-data": base64.b64encode(key_pem).decode()}


def _after_materialising(cert_pem, key_pem, tmp_path):
    # CA, certificate and key are all in memory before the exec section fails the load.
    return dict(inline(cert_pem, key_pem), exec={"apiVersion": "v0", "command": "x"})


@pytest.mark.parametrize("user, needle", [
    (_bad_cert, "client-certificate-data/client-key-data: not a usable certificate and key"),
    (_bad_key, "client-certificate-data/client-key-data: not a usable certificate and key"),
    (_missing_file, "client-certificate/client-key-data: cannot read it (FileNotFoundError)"),
    (_after_materialising, "exec apiVersion 'v0' not supported"),
], ids=["bad-cert", "bad-key", "missing-file", "error-after-materialising"])
def test_failed_load_leaves_nothing(tmp_path, double, private_tmp, mode, user, needle):
    _, _, cert_pem, key_pem = double.client_cert(NODE)
    needles = canary(key_pem)
    before = open_memfds()
    with pytest.raises(KubeconfigError) as err:
        load(write(tmp_path, double, user(cert_pem, key_pem, tmp_path)))
    assert needle in str(err.value)
    assert not any(n.decode() in str(err.value) for n in needles)  # no secret in the message
    gc.collect()
    assert_nothing_left(private_tmp, needles, before)


def test_missing_kubeconfig_is_one_error(tmp_path, private_tmp, mode):
    with pytest.raises(KubeconfigError, match="no such file"):
        load(str(tmp_path / "absent"))
    assert os.listdir(private_tmp) == []


def test_garbage_collected_without_close(tmp_path, double, private_tmp, mode):
    _, _, cert_pem, key_pem = double.client_cert(NODE)
    before = open_memfds()
    kc = load(write(tmp_path, double, inline(cert_pem, key_pem)))
    assert open_memfds() != before or os.listdir(private_tmp) != []
    del kc
    gc.collect()
    assert_nothing_left(private_tmp, canary(key_pem), before)


def test_exec_certificates_keep_two_versions(tmp_path, double, private_tmp, mode):
    """An exec plugin's certificate is refreshed on expiry: old copies are released (the
    newest two stay, for a request on another thread still opening the previous path)."""
    _, _, cert_pem, key_pem = double.client_cert(NODE)
    before = open_memfds()
    kc = load(write(tmp_path, double, {"token": "t"}))
    spec = ExecSpec("client.authentication.k8s.io/v1", "plugin")
    answer = json.dumps({"apiVersion": spec.api_version, "kind": "ExecCredential",
                         "status": {"clientCertificateData": cert_pem.decode(),
                                    "clientKeyData": key_pem.decode()}}).encode()
    paths = [kc._parse_exec(answer, spec, "plugin").key_file for _ in range(5)]
    assert len(set(paths)) >= 2
    held = open_memfds() if mode == "memfd" else [
        f for f in os.listdir(private_tmp / os.listdir(private_tmp)[0]) if ".key" in f]
    held_keys = [h for h in held if "exec-client.key" in h]
    assert len(held_keys) == SecretFiles.KEEP
    with pytest.raises(CredentialError, match="not a usable certificate and key"):
        kc._parse_exec(answer.replace(b"BEGIN PRIVATE KEY", b"BEGIN NOTHING"), spec, "plugin")
    kc.close()
    assert_nothing_left(private_tmp, canary(key_pem), before)


def test_fallback_only_when_memfd_refused(mode):
    files = SecretFiles()
    try:
        path = files.put("probe", b"x")
        assert files.in_memory is (mode == "memfd")
        assert path.startswith("/proc/self/fd/") is (mode == "memfd")
    finally:
        files.close()
