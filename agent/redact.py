"""Secrets never leave the host in a bundle: private keys, tokens, passwords, registry auths and
kubeconfig credentials are replaced before anything is written (sos does the same in its
cleaner). A quoted value stays quoted, so a redacted TOML, YAML or JSON file still parses."""
import re

REDACTED = "REDACTED"
_PEM_PRIVATE = re.compile(
    r"(-----BEGIN ([A-Z0-9 ]*)PRIVATE KEY-----)(.*?)(-----END \2PRIVATE KEY-----)", re.DOTALL
)
# key: value / key = value / "key": "value" where the key names a secret. `auth` is the
# base64 user:password of containerd's registry config (`[plugins...registry.configs.*.auth]`).
_SECRET_FIELD = re.compile(
    r"""(?im)^(?P<lead>\s*-?\s*["']?(?P<key>[\w.-]*(?:token|password|passwd|secret|"""
    r"""client-key-data|private[-_]key|api[-_]?key|credentials?)[\w.-]*|auth|identitytoken)"""
    r"""["']?\s*[:=]\s*)(?P<value>\S.*?)(?P<tail>,?)\s*$"""
)
_BEARER = re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{8,}")
_EMPTY = ("", "null", "~", "{}", "[]", '""', "''")


def _field(m: "re.Match[str]") -> str:
    value = m.group("value")
    if value.strip() in _EMPTY:
        return m.group(0)
    quote = value[0] if value[0] in "\"'" and len(value) > 1 and value[-1] == value[0] else ""
    return f"{m.group('lead')}{quote}{REDACTED}{quote}{m.group('tail')}"


def redact(text: str) -> str:
    text = _PEM_PRIVATE.sub(lambda m: f"{m.group(1)}\n{REDACTED}\n{m.group(4)}", text)
    text = _SECRET_FIELD.sub(_field, text)
    return _BEARER.sub(lambda m: f"{m.group(1)}{REDACTED}", text)
