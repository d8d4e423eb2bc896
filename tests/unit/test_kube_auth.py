"""Client-certificate, token, tokenFile and exec-plugin authentication against the HTTPS double.

The exec plugins are real executable scripts written by the test (as aws-iam-authenticator
would be on an EKS hybrid node); they count their invocations in a file.
"""
import base64
import json
import logging
import os
import sys
import textwrap
import time

import pytest

from agent.kube.client import ApiError, KubeClient, Unreachable
from agent.kube.credentials import CredentialError
from agent.kube.kubeconfig import KubeconfigError, load
from tests.kube_double import CA, KubeDouble, kubeconfig_yaml

NODE = "gpu-host-1"


@pytest.fixture
def double(tmp_path):
    d = KubeDouble(str(tmp_path)).start()
    d.add_node(NODE)
    yield d
    d.stop()


def write_kubeconfig(tmp_path, double, user, **kw):
    path = tmp_path / "kubeconfig"
    path.write_text(kubeconfig_yaml(double.url, user=user, **kw))
    return str(path)


def plugin(tmp_path, body, name="cred-plugin"):
    """An executable ExecCredential plugin; `body` is Python run with `n` = invocation count."""
    path = tmp_path / name
    counter = tmp_path / f"{name}.count"
    path.write_text(f"#!{sys.executable}\n" + textwrap.dedent(f"""\
        import json, os, sys, time
        counter = {str(counter)!r}
        n = int(open(counter).read()) + 1 if os.path.exists(counter) else 1
        open(counter, "w").write(str(n))
        info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
        """) + textwrap.dedent(body))
    path.chmod(0o755)
    return str(path), counter


def calls(counter):
    return int(counter.read_text()) if counter.exists() else 0


def test_client_certificate_data_inline(tmp_path, double):
    _, _, cert_pem, key_pem = double.client_cert(NODE)
    kc = write_kubeconfig(tmp_path, double, {
        "client-certificate-data": base64.b64encode(cert_pem).decode(),
        "client-key-data": base64.b64encode(key_pem).decode()}, ca_data=double.ca.pem)
    client = KubeClient(load(kc), timeout=5)
    assert client.get_node(NODE)["metadata"]["name"] == NODE
    assert double.log[-1]["user"] == f"system:node:{NODE}"
    # Inline material is held in memory files (memfd_create(2)), never on disk.
    ca_path = client.kubeconfig.verify
    assert ca_path.startswith("/proc/self/fd/")
    assert os.readlink(ca_path).startswith("/memfd:gpu-node-agent-ca.crt")
    client.close()
    # inline secrets do not outlive the client (the fd number may be reused by now)
    assert not os.path.exists(ca_path) or not os.readlink(ca_path).startswith("/memfd:gpu-node-agent-")


def test_static_token_and_unknown_token_401(tmp_path, double):
    double.add_token("s3cr3t-token", f"system:node:{NODE}")
    client = KubeClient(load(write_kubeconfig(tmp_path, double, {"token": "s3cr3t-token"},
                                              ca_path=double.ca.path)), timeout=5)
    assert client.get_node(NODE)["metadata"]["name"] == NODE
    bad = KubeClient(load(write_kubeconfig(tmp_path, double, {"token": "wrong"},
                                           ca_path=double.ca.path)), timeout=5)
    with pytest.raises(ApiError) as err:
        bad.get_node(NODE)
    assert err.value.status == 401
    assert [e["status"] for e in double.log[-2:]] == [401, 401]  # retried exactly once


def test_token_file_is_reread_after_rotation(tmp_path, double):
    tf = tmp_path / "token"
    tf.write_text("token-a\n")
    double.add_token("token-a", f"system:node:{NODE}")
    client = KubeClient(load(write_kubeconfig(tmp_path, double, {"tokenFile": "token"},
                                              ca_path=double.ca.path)), timeout=5)
    client.get_node(NODE)
    double.tokens.clear()
    double.add_token("token-b", f"system:node:{NODE}")
    tf.write_text("token-b\n")
    client.get_node(NODE)
    assert [e["status"] for e in double.log] == [200, 200]


@pytest.mark.parametrize("api_version", ["client.authentication.k8s.io/v1beta1",
                                         "client.authentication.k8s.io/v1"])
def test_exec_plugin_token_cached_until_expiry_then_refreshed(tmp_path, double, api_version):
    for n in (1, 2):
        double.add_token(f"exec-token-{n}", f"system:node:{NODE}")
    cmd, counter = plugin(tmp_path, """
        exp = os.environ["EXPIRES"] if n == 1 else "2099-01-01T00:00:00Z"
        assert info["spec"]["interactive"] is False
        print(json.dumps({"apiVersion": info["apiVersion"], "kind": "ExecCredential",
                          "status": {"token": f"exec-token-{n}", "expirationTimestamp": exp}}))
        """)
    expires = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))
    user = {"exec": {"apiVersion": api_version, "command": cmd, "interactiveMode": "Never",
                     "env": [{"name": "EXPIRES", "value": expires}]}}
    kc = load(write_kubeconfig(tmp_path, double, user, ca_path=double.ca.path))
    client = KubeClient(kc, timeout=5)
    for _ in range(3):
        client.get_node(NODE)
    assert calls(counter) == 1  # cached while valid
    creds = kc.credentials(now=time.time() + 3600)  # past expiry (minus margin): refreshed
    assert calls(counter) == 2 and creds.token == "exec-token-2"


def test_exec_plugin_401_refreshes_once(tmp_path, double):
    double.add_token("exec-token-2", f"system:node:{NODE}")  # the first token is already revoked
    cmd, counter = plugin(tmp_path, """
        print(json.dumps({"apiVersion": info["apiVersion"], "kind": "ExecCredential",
                          "status": {"token": f"exec-token-{n}"}}))
        """)
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": cmd}}
    client = KubeClient(load(write_kubeconfig(tmp_path, double, user, ca_path=double.ca.path)), timeout=5)
    assert client.get_node(NODE)["metadata"]["name"] == NODE
    assert calls(counter) == 2 and [e["status"] for e in double.log] == [401, 200]


def test_exec_plugin_client_certificate(tmp_path, double):
    _, _, cert_pem, key_pem = double.client_cert(NODE)
    cmd, _ = plugin(tmp_path, f"""
        print(json.dumps({{"apiVersion": info["apiVersion"], "kind": "ExecCredential",
                          "status": {{"clientCertificateData": {cert_pem.decode()!r},
                                     "clientKeyData": {key_pem.decode()!r}}}}}))
        """)
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": cmd,
                     "interactiveMode": "IfAvailable"}}
    client = KubeClient(load(write_kubeconfig(tmp_path, double, user, ca_path=double.ca.path)), timeout=5)
    client.get_node(NODE)
    assert double.log[-1]["user"] == f"system:node:{NODE}"


def test_exec_plugin_failing_or_hanging_is_unreachable_without_secrets(tmp_path, double, caplog):
    caplog.set_level(logging.DEBUG)
    cmd, _ = plugin(tmp_path, """
        sys.stderr.write("could not get token: AccessDenied\\n"); sys.exit(1)
        """, name="failing")
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": cmd}}
    client = KubeClient(load(write_kubeconfig(tmp_path, double, user, ca_path=double.ca.path)), timeout=5)
    with pytest.raises(Unreachable, match="exited 1: could not get token: AccessDenied"):
        client.get_node(NODE)
    # it hangs, and its child holds stdout open too
    hang, _ = plugin(tmp_path, "import subprocess; subprocess.Popen(['sleep', '30']); time.sleep(30)\n",
                     name="hanging")
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": hang}}
    kc = load(write_kubeconfig(tmp_path, double, user, ca_path=double.ca.path), exec_timeout=1)
    started = time.monotonic()
    with pytest.raises(Unreachable, match="no answer in 1s"):
        KubeClient(kc, timeout=5).get_node(NODE)
    assert time.monotonic() - started < 10
    assert double.log == []  # no request went out without credentials


def test_exec_plugin_wrong_api_version_and_missing_interactive_mode(tmp_path, double):
    cmd, _ = plugin(tmp_path, """
        print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1alpha1",
                          "kind": "ExecCredential", "status": {"token": "t"}}))
        """)
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": cmd}}
    kc = load(write_kubeconfig(tmp_path, double, user, ca_path=double.ca.path))
    with pytest.raises(CredentialError, match="answered"):
        kc.credentials()
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": cmd}}
    with pytest.raises(KubeconfigError, match="interactiveMode is required"):
        load(write_kubeconfig(tmp_path, double, user, ca_path=double.ca.path))


def test_tls_error_with_a_foreign_ca(tmp_path, double):
    other = CA(str(tmp_path), name="other-ca")
    double.add_token("t", f"system:node:{NODE}")
    client = KubeClient(load(write_kubeconfig(tmp_path, double, {"token": "t"}, ca_path=other.path)),
                        timeout=5)
    with pytest.raises(Unreachable, match="TLS error"):
        client.get_node(NODE)


def test_no_secret_in_logs_errors_or_repr(tmp_path, double, caplog):
    caplog.set_level(logging.DEBUG)
    secret = "do-not-leak-8f3a9c"
    client = KubeClient(load(write_kubeconfig(tmp_path, double, {"token": secret},
                                              ca_path=double.ca.path)), timeout=5)
    with pytest.raises(ApiError) as err:
        client.get_node(NODE)
    texts = [r.getMessage() for r in caplog.records] + [str(err.value),
                                                         repr(client.kubeconfig.credentials())]
    assert not any(secret in t for t in texts)


def test_named_context_and_missing_context(tmp_path, double):
    double.add_token("t", f"system:node:{NODE}")
    doc = json.loads(kubeconfig_yaml(double.url, double.ca.path, {"token": "t"}))
    doc["contexts"].append({"name": "other", "context": {"cluster": "c", "user": "u"}})
    doc["current-context"] = "missing"
    path = tmp_path / "kc"
    path.write_text(json.dumps(doc))
    assert KubeClient(load(str(path), context="other"), timeout=5).get_node(NODE)
    with pytest.raises(KubeconfigError, match="no context named 'missing'"):
        load(str(path))
