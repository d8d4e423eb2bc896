"""What names a secret, and what a secret looks like inside any string: the rules both layers of
redaction apply (agent/host/redact.py, structural; agent/host/redact_lines.py, line by line).
"""
import base64
import binascii
import re

REDACTED = "REDACTED"

# -- what names a secret ------------------------------------------------------------------
# Matched against the key lower-cased with every non-alphanumeric removed ("Password",
# "client-key-data", "identityToken", "aws_secret_access_key" -> "awssecretaccesskey").
# `auth` and `Authorization`, but not `author`/`authority` (kubeconfig's
# certificate-authority is a CA path).
_SECRET_WORDS = re.compile(
    r"pass(?:word|wd|phrase)|secret|token|auth(?!orit(?:y|ies)|ors?$)|credential|apikey|"
    r"accesskey|"
    # nodeadm's NodeConfig spec.hybrid.ssm.activationCode (with the activation id, it
    # registers a machine as an SSM managed instance: EKS Hybrid Nodes, "Prepare credentials").
    r"activationcode|"
    r"privatekey|signingkey|encryptionkey|sshkey|keydata|session|cookie|bearer"
)
# A key naming where a secret is stored is not itself one (tls_key_file, tokenFile, ...).
_REFERENCE_SUFFIXES = ("file", "path", "dir", "directory")


def is_secret_name(name: str) -> bool:
    compact = re.sub(r"[^a-z0-9]", "", name.lower())
    if not compact or compact.endswith(_REFERENCE_SUFFIXES):
        return False
    return _SECRET_WORDS.search(compact) is not None


# -- secrets inside any string ---------------------------------------------------------------
# RFC 7468 private keys: "RSA ", "EC ", "DSA ", "OPENSSH ", "ENCRYPTED " or none (PKCS#8), and
# OpenPGP's "PRIVATE KEY BLOCK". An unterminated block (a truncated file) is redacted to the end.
_PEM_PRIVATE = re.compile(
    r"(-----BEGIN (?P<label>[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?)-----)"
    r"(?:.*?(?P<end>-----END (?P=label)-----)|.*\Z)",
    re.DOTALL,
)
# The same, base64-encoded (kubeconfig *-data fields): "-----BEGIN " is "LS0tLS1CRUdJTi".
_PEM_B64 = re.compile(r"LS0tLS1CRUdJTi[A-Za-z0-9+/=\\n]*")
# Environment entries and shell-style assignments: FOO_TOKEN=value, AWS_SESSION_TOKEN=...
_ENV_ASSIGN = re.compile(r"(?P<name>\b[A-Za-z_][A-Za-z0-9_.-]*)=(?P<value>[^\s\"',;&]+)")
# RFC 6750 bearer tokens; 12+ characters, so prose ("Bearer Tokens") is left alone.
_BEARER = re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]{12,}")
# HTTP Basic credentials (RFC 7617): base64 of user:password, 8+ characters with a digit, a
# symbol or a lower-to-upper hump, so not a plain word ("Basic TCP/IP", "Basic Settings").
_BASIC = re.compile(
    r"\b(Basic\s+)(?=[A-Za-z0-9+/]*?(?:[0-9+/=]|[a-z][A-Z]))[A-Za-z0-9+/]{8,}={0,2}"
)
_URL_USERINFO = re.compile(r"(?P<lead>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@\"']+:)[^@\s/\"']+@")


def _pem_sub(m: "re.Match[str]") -> str:
    label = m.group("label")
    # Keep the BEGIN line's indentation on the lines we write, so a PEM block inside a YAML
    # block scalar stays inside it.
    line_start = m.string.rfind("\n", 0, m.start()) + 1
    before = m.string[line_start: m.start()]
    pad = before if before.strip(" \t") == "" else ""
    return f"{m.group(1)}\n{pad}{REDACTED}\n{pad}-----END {label}-----"


def _b64_pem_sub(m: "re.Match[str]") -> str:
    blob = m.group(0).replace("\\n", "")
    try:
        decoded = base64.b64decode(blob + "=" * (-len(blob) % 4), validate=False)
    except (binascii.Error, ValueError):
        return REDACTED
    return REDACTED if b"PRIVATE KEY" in decoded[:80] or len(decoded) < 20 else m.group(0)


def _env_sub(m: "re.Match[str]") -> str:
    if is_secret_name(m.group("name")):
        return f"{m.group('name')}={REDACTED}"
    return m.group(0)


def redact_inline(text: str, pem: bool = True) -> str:
    """Secrets that can sit inside any string, whatever its key (``pem=False``: the caller
    already replaced whole private-key blocks, which span lines)."""
    if pem and "PRIVATE KEY" in text:
        text = _PEM_PRIVATE.sub(_pem_sub, text)
    if "LS0tLS1CRUdJTi" in text:
        text = _PEM_B64.sub(_b64_pem_sub, text)
    if "=" in text:
        text = _ENV_ASSIGN.sub(_env_sub, text)
    text = _BEARER.sub(lambda m: f"{m.group(1)}{REDACTED}", text)
    text = _BASIC.sub(lambda m: f"{m.group(1)}{REDACTED}", text)
    if "://" in text:
        text = _URL_USERINFO.sub(lambda m: f"{m.group('lead')}{REDACTED}@", text)
    return text
