"""Secrets never leave the host in a bundle: private keys, tokens, passwords and kubeconfig
credentials are replaced before anything is written (sos does the same in its cleaner)."""
import re

REDACTED = "REDACTED"
_PEM_PRIVATE = re.compile(
    r"(-----BEGIN ([A-Z0-9 ]*)PRIVATE KEY-----)(.*?)(-----END \2PRIVATE KEY-----)", re.DOTALL
)
# key: value / key = value / "key": "value" where the key names a secret.
_SECRET_FIELD = re.compile(
    r"""(?im)^(?P<lead>\s*-?\s*["']?(?P<key>[\w.-]*(?:token|password|passwd|secret|"""
    r"""client-key-data|private[-_]key|api[-_]?key|credentials?)[\w.-]*)["']?\s*[:=]\s*)"""
    r"""(?P<value>\S.*?)(?P<tail>[,]?)\s*$"""
)
_BEARER = re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{8,}")


def redact(text: str) -> str:
    text = _PEM_PRIVATE.sub(lambda m: f"{m.group(1)}\n{REDACTED}\n{m.group(4)}", text)
    text = _SECRET_FIELD.sub(
        lambda m: f"{m.group('lead')}{REDACTED}{m.group('tail')}"
        if m.group("value").strip("\"'") not in ("", "null", "~", "{}", "[]")
        else m.group(0),
        text,
    )
    return _BEARER.sub(lambda m: f"{m.group(1)}{REDACTED}", text)
