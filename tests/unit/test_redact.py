"""collect redacts secrets before anything is written."""
from agent.host.redact import redact
from agent.host.redact_secrets import REDACTED

KUBECONFIG = """apiVersion: v1
users:
- name: kubelet
  user:
    client-certificate-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t
    client-key-data: LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQ==
    token: eyJhbGciOiJSUzI1NiIsImtpZCI6ImFiYyJ9.payload.sig
"""
PEM = """-----BEGIN RSA PRIVATE KEY-----
MIIEowIBAAKCAQEAsecretsecretsecret
-----END RSA PRIVATE KEY-----
-----BEGIN CERTIFICATE-----
MIIBcertificatebodyisnotsecret
-----END CERTIFICATE-----
"""


def test_kubeconfig_credentials_are_redacted_and_the_rest_kept():
    out = redact(KUBECONFIG)
    assert "LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQ==" not in out
    assert "eyJhbGciOiJSUzI1NiIsImtpZCI6ImFiYyJ9" not in out
    assert f"client-key-data: {REDACTED}" in out and f"token: {REDACTED}" in out
    assert "client-certificate-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t" in out  # public part


def test_private_key_blocks_are_redacted_certificates_kept():
    out = redact(PEM)
    assert "secretsecret" not in out and REDACTED in out
    assert "MIIBcertificatebodyisnotsecret" in out


def test_bearer_tokens_and_json_secrets():
    out = redact('Authorization: Bearer abcdefghijklmnop\n"password": "hunter22",\n')
    assert "abcdefghijklmnop" not in out and "hunter22" not in out


def test_quoted_values_stay_quoted_so_toml_still_parses():
    import sys

    if sys.version_info >= (3, 11):
        import tomllib
    else:
        import tomli as tomllib
    text = (
        '[plugins."io.containerd.grpc.v1.cri".registry.configs."r.example".auth]\n'
        '  auth = "dXNlcjpwYXNzd29yZA=="\n  password = "hunter22"\n  username = "bob"\n'
    )
    out = redact(text)
    assert "dXNlcjpwYXNzd29yZA==" not in out and "hunter22" not in out
    parsed = tomllib.loads(out)
    cfg = parsed["plugins"]["io.containerd.grpc.v1.cri"]["registry"]["configs"]["r.example"]["auth"]
    assert cfg == {"auth": REDACTED, "password": REDACTED, "username": "bob"}
