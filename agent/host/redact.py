"""Secrets never leave the host in a bundle (sos does the same in its cleaner).

Two layers, both applied by ``collect`` before anything is written:

- **Structural**, for files that parse (TOML, YAML, JSON by extension or content) and for
  ``containerd config dump`` output (TOML): every key path whose *last* element names a secret
  (``password``, ``Password``, ``auth``, ``identitytoken``, ``Authorization``,
  ``aws_secret_access_key``, ``session``...; see :func:`is_secret_name`) has its string values
  replaced by :data:`REDACTED`, numbers by 0, recursively through lists; tables under such a
  key are walked, so a leaf decides. Every string anywhere is also scrubbed of private-key PEM
  blocks, ``NAME_TOKEN=value`` environment entries, ``Basic``/``Bearer`` credentials and
  ``user:password@`` in URLs. The file is then re-emitted so it parses to exactly the redacted
  structure (checked by re-parsing): first the original text with line-level redaction (keeps
  layout and comments), else a fresh emission of the redacted data (TOML by our own emitter for
  the subset ``tomllib`` returns, YAML by PyYAML's safe dumper, JSON by ``json``).
- **Text**, for everything else (and files that do not parse): the same rules line by line,
  including multi-line TOML strings, YAML block scalars and multi-line arrays under a secret key.
"""
import base64
import binascii
import datetime
import functools
import json
import math
import re
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

import yaml

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised by the 3.9 unit run
    import tomli as tomllib

REDACTED = "REDACTED"
# The header a re-emitted file starts with, so a reader knows comments and layout are gone.
REEMITTED_NOTE = "# redacted by gpu-node-agent collect: re-emitted from the parsed file\n"
MAX_NODES = 200_000  # values walked per document: a YAML alias bomb must not expand forever

# -- what names a secret ------------------------------------------------------------------
# Matched against the key lower-cased with every non-alphanumeric removed ("Password",
# "client-key-data", "identityToken", "aws_secret_access_key" -> "awssecretaccesskey").
# `auth` and `Authorization`, but not `author`/`authority` (kubeconfig's
# certificate-authority is a CA path).
_SECRET_WORDS = re.compile(
    r"pass(?:word|wd|phrase)|secret|token|auth(?!orit(?:y|ies)|ors?$)|credential|apikey|"
    r"accesskey|"
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
# A line with none of these cannot hold anything the line rules replace (every secret name
# contains one; see _SECRET_WORDS): skipped cheaply (dpkg's status file is 20,000 lines).
_HINT = re.compile(
    r"pass|secret|token|auth|cred|api|access|priv|sign|encrypt|ssh|key|session|cookie|bearer|"
    r"basic|://|LS0tLS1CRUdJTi",
    re.IGNORECASE,
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


# -- structural ------------------------------------------------------------------------------
class TooLarge(ValueError):
    """A document with more than MAX_NODES values (expanded): not walked."""


def _secret_value(value: Any) -> Any:
    if isinstance(value, bool):
        return value  # one bit, and replacing it would change the type
    if isinstance(value, str):
        return value if value == "" else REDACTED
    if isinstance(value, int):
        return 0
    if isinstance(value, float):
        return 0.0
    return value


class _Walker:
    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.found: Set[str] = set()  # original secret strings, to check the output for

    def walk(self, value: Any, secret: bool) -> Any:
        self.budget -= 1
        if self.budget < 0:
            raise TooLarge(f"more than {MAX_NODES} values")
        if isinstance(value, dict):
            return {k: self.walk(v, is_secret_name(str(k))) for k, v in value.items()}
        if isinstance(value, list):
            return [self.walk(v, secret) for v in value]
        if secret:
            new = _secret_value(value)
            if isinstance(value, str) and new != value:
                self.found.add(value)
            return new
        if isinstance(value, str):
            new = redact_inline(value)
            if new != value:
                self.found.add(value)
            return new
        return value


def redact_data(data: Any, budget: int = MAX_NODES) -> Any:
    """A copy of parsed data with secrets replaced (module docstring). Raises TooLarge."""
    return _Walker(budget).walk(data, False)


# -- TOML emitter (the subset tomllib returns) -----------------------------------------------
# \Z, not $: "$" also matches before a final newline, and a key "a\n" must be quoted.
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+\Z")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f",
            "\r": "\\r"}


def _toml_str(s: str) -> str:
    out = []
    for ch in s:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _toml_key(k: str) -> str:
    return k if _BARE_KEY.match(k) else _toml_str(k)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return _toml_str(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, (datetime.datetime, datetime.date, datetime.time)):
        return v.isoformat()
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        body = ", ".join(f"{_toml_key(str(k))} = {_toml_value(x)}" for k, x in v.items())
        return "{ " + body + " }" if body else "{}"
    raise TypeError(f"no TOML form for {type(v).__name__}")


def emit_toml(data: dict) -> str:
    """TOML 1.0 text that tomllib parses back to ``data``: scalars and arrays (inline) first in
    each table, then each sub-table under its own ``[a."b.c"]`` header."""
    lines: List[str] = []

    def table(path: List[str], tbl: dict) -> None:
        scalars = [(k, v) for k, v in tbl.items() if not isinstance(v, dict)]
        tables = [(k, v) for k, v in tbl.items() if isinstance(v, dict)]
        if path and (scalars or not tables):
            lines.append("[" + ".".join(_toml_key(p) for p in path) + "]")
        for k, v in scalars:
            lines.append(f"{_toml_key(str(k))} = {_toml_value(v)}")
        if scalars and tables:
            lines.append("")
        for k, v in tables:
            table(path + [str(k)], v)

    table([], data)
    return "\n".join(lines) + "\n"


# -- text, line by line ----------------------------------------------------------------------
_KEY_ELEM = r"""(?:[A-Za-z0-9_-]+|"(?:[^"\\\n]|\\.)*"|'[^'\n]*')"""
_FIELD = re.compile(
    rf"""^(?P<lead>[ \t]*(?:\#[ \t]*)?(?:-[ \t]+)?"""
    rf"""(?P<key>{_KEY_ELEM}(?:[ \t]*\.[ \t]*{_KEY_ELEM})*)[ \t]*[:=][ \t]*)(?P<rest>.*)$"""
)
_KEY_ELEMS = re.compile(_KEY_ELEM)
_STRING = re.compile(
    r'"""[\s\S]*?"""(?!")|'
    r"'''[\s\S]*?'''(?!')|"
    r'"(?:[^"\\\n]|\\.)*"|'
    r"'[^'\n]*'"
)
_BLOCK_SCALAR = re.compile(r"^[|>][-+0-9]*[ \t]*(?:#.*)?$")
_EMPTY = ("", "null", "~", "{}", "[]", '""', "''")
# Booleans as TOML 1.0 and JSON (RFC 8259) spell them, and YAML 1.2's core schema variants.
_BOOLEANS = ("true", "false", "True", "False", "TRUE", "FALSE")
# A quoted or bare inline pair anywhere on a line: TOML inline tables, one-line JSON.
_INLINE_PAIR = re.compile(
    rf"""(?P<key>{_KEY_ELEM})(?P<sep>[ \t]*[:=][ \t]*)"""
    r"""(?P<value>"(?:[^"\\\n]|\\.)*"|'[^'\n]*')"""
)


def _last_key(key: str) -> str:
    elems = _KEY_ELEMS.findall(key)
    last = elems[-1] if elems else key
    return last[1:-1] if last[:1] in "\"'" and len(last) >= 2 else last


def _quoted_redacted(token: str) -> str:
    for q in ('"""', "'''", '"', "'"):
        if token.startswith(q):
            return f"{q}{REDACTED}{q}" if len(q) == 1 else f'"{REDACTED}"'
    return REDACTED


def _strings_redacted(span: str) -> str:
    return _STRING.sub(lambda m: _quoted_redacted(m.group(0)), span)


def _bracket_end(text: str) -> int:
    """Index just past the bracket that closes text[0], skipping strings; -1 if not closed."""
    depth = 0
    i = 0
    while i < len(text):
        m = _STRING.match(text, i)
        if m:
            i = m.end()
            continue
        ch = text[i]
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
            if depth == 0:
                return i + 1
        elif ch == "#":  # a comment runs to the end of its line
            nl = text.find("\n", i)
            i = len(text) if nl < 0 else nl
            continue
        i += 1
    return -1


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def _redact_field(lines: List[str], i: int, m: "re.Match[str]") -> Tuple[List[str], int]:
    """The replacement for the secret field starting at lines[i]; returns (lines, next i)."""
    lead, rest = m.group("lead"), m.group("rest")
    nl = "\n" if lines[i].endswith("\n") else ""
    value = rest.rstrip("\r\n")
    stripped = value.strip()
    if stripped in _EMPTY or stripped.startswith(("&", "*", "!")):
        return [lines[i]], i + 1
    if stripped[:3] in ('"""', "'''"):
        remainder = "".join(lines[i:])
        sm = _STRING.match(remainder, m.start("rest") + len(value) - len(value.lstrip()))
        # Never closed (the rest of the file is the secret): the one-line alternatives would
        # match the first two quotes as an empty string and leave the value after them.
        if sm is None or not sm.group(0).startswith(stripped[:3]):
            return [lead + f'"{REDACTED}"' + nl], len(lines)
        consumed = remainder[: sm.end()].count("\n")
        tail_line = lines[i + consumed]
        tail = remainder[sm.end():].split("\n", 1)[0]
        tail_nl = "\n" if tail_line.endswith("\n") else ""
        return [lead + f'"{REDACTED}"' + redact_inline(tail, pem=False) + tail_nl], i + consumed + 1
    if stripped[:1] in "[{":
        remainder = "".join(lines[i:])
        start = m.start("rest") + len(value) - len(value.lstrip())
        end = _bracket_end(remainder[start:])
        if end < 0:
            return [lead + REDACTED + nl], len(lines)
        span = remainder[start: start + end]
        consumed = span.count("\n")
        tail = remainder[start + end:].split("\n", 1)[0]
        last = lines[i + consumed]
        out = lead + _strings_redacted(span) + tail + ("\n" if last.endswith("\n") else "")
        return out.splitlines(keepends=True), i + consumed + 1
    if _BLOCK_SCALAR.match(stripped):  # YAML |, >: the more-indented lines that follow
        base = _indent(lines[i])
        j = i + 1
        while j < len(lines) and (not lines[j].strip() or _indent(lines[j]) > base):
            j += 1
        return [lead + f'"{REDACTED}"' + nl], j
    sm = _STRING.match(value.lstrip())
    if sm is not None:
        pad = value[: len(value) - len(value.lstrip())]
        tail = value.lstrip()[sm.end():]
        return [lead + pad + _quoted_redacted(sm.group(0)) + tail + nl], i + 1
    # A bare value: up to a trailing comma (JSON) or a comment.
    bm = re.match(r"^(?P<v>.*?)(?P<tail>[ \t]*,?[ \t]*(?:[ \t]#.*)?)$", value)
    tail = bm.group("tail") if bm else ""
    if bm and bm.group("v") in _BOOLEANS:
        # One bit, kept by the structural walk too (_secret_value); a bare REDACTED here would
        # not parse, and the file would lose its layout and comments to re-emission.
        return [lines[i]], i + 1
    return [lead + REDACTED + tail + nl], i + 1


def _inline_pairs(line: str) -> str:
    def sub(m: "re.Match[str]") -> str:
        if is_secret_name(_last_key(m.group("key"))) and m.group("value") not in ('""', "''"):
            return m.group("key") + m.group("sep") + _quoted_redacted(m.group("value"))
        return m.group(0)

    return _INLINE_PAIR.sub(sub, line) if ("=" in line or ":" in line) else line


# Lines end at "\n" only: str.splitlines also breaks at \v, \f, \x1c-\x1e, \x85, U+2028 and
# U+2029, which TOML and YAML keep inside a value, so a secret after one would sit on a "line"
# of its own, and the multi-line rules (which count "\n") would copy part of it out again.
_LINES = re.compile(r"[^\n]*\n|[^\n]+")


def redact_text(text: str) -> str:
    """Line-level redaction for any text (module docstring)."""
    if "PRIVATE KEY" in text:  # blocks span lines: before the line walk
        text = _PEM_PRIVATE.sub(_pem_sub, text)
    lines = _LINES.findall(text)
    out: List[str] = []
    i = 0
    while i < len(lines):
        if not _HINT.search(lines[i]):
            out.append(lines[i])
            i += 1
            continue
        m = _FIELD.match(lines[i])
        if m and is_secret_name(_last_key(m.group("key"))):
            new, i = _redact_field(lines, i, m)
            out.extend(new)
            continue
        out.append(redact_inline(_inline_pairs(lines[i]), pem=False))
        i += 1
    return "".join(out)


# Kept for callers of the first version: text-level redaction.
redact = redact_text


# -- documents -------------------------------------------------------------------------------
def _same(a: Any, b: Any) -> bool:
    """Deep equality where NaN equals NaN (TOML and YAML both have it)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _parse_toml(text: str) -> Any:
    return tomllib.loads(text)


def _parse_yaml(text: str) -> Any:
    return list(yaml.load_all(text, Loader=_YAML_LOADER))  # noqa: S506 (safe loader)


def _parse_json(text: str) -> Any:
    return json.loads(text)


def _emit_toml(data: Any) -> str:
    return REEMITTED_NOTE + emit_toml(data)


def _emit_yaml(docs: Any) -> str:
    body = yaml.safe_dump_all(docs, sort_keys=False, allow_unicode=True, default_flow_style=False)
    return REEMITTED_NOTE + body


def _emit_yaml_ascii(docs: Any) -> str:
    # PyYAML writes some characters raw under allow_unicode that YAML reads as line breaks
    # (U+0085 NEL, U+2028): escaped, they survive.
    body = yaml.safe_dump_all(docs, sort_keys=False, allow_unicode=False, default_flow_style=False)
    return REEMITTED_NOTE + body


def _emit_json(data: Any) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


_FORMATS: Dict[str, Tuple[Callable[[str], Any], Tuple[Callable[[Any], str], ...]]] = {
    "toml": (_parse_toml, (_emit_toml,)),
    "yaml": (_parse_yaml, (_emit_yaml, _emit_yaml_ascii)),
    "json": (_parse_json, (_emit_json,)),
}


def kind_for(path: str, text: str) -> str:
    """toml, yaml, json by extension; JSON also by content; else text."""
    lower = path.lower()
    if lower.endswith(".toml"):
        return "toml"
    if lower.endswith((".yaml", ".yml")):
        return "yaml"
    if lower.endswith(".json") or text.lstrip()[:1] in ("{", "["):
        return "json"
    return "text"


def _leaks(text: str, secrets: Set[str]) -> bool:
    return any(s in text for s in secrets if len(s) >= 4 and s != REDACTED)


def redact_document(text: str, kind: str) -> str:
    """``text`` with secrets replaced; a TOML/YAML/JSON document that parses is re-emitted so
    it parses to exactly the structurally redacted data (module docstring)."""
    fmt = _FORMATS.get(kind)
    if fmt is None:
        return redact_text(text)
    parse, emitters = fmt
    try:
        data = parse(text)
    except (ValueError, yaml.YAMLError, RecursionError, TypeError):
        return redact_text(text)  # not a valid document: line-level rules only
    walker = _Walker(MAX_NODES)
    try:
        redacted = walker.walk(data, False)
    except (TooLarge, RecursionError):
        return redact_text(text)
    by_line = redact_text(text)
    candidates: List[Callable[[], str]] = [lambda: by_line]
    candidates += [functools.partial(emit, redacted) for emit in emitters]
    if _same(redacted, data) and by_line == text:
        return text  # nothing secret, nothing changed
    fallback: Optional[str] = None
    for make in candidates:
        try:
            out = make()
            again = parse(out)
        except (ValueError, TypeError, yaml.YAMLError, RecursionError):
            continue
        if _same(again, redacted):
            if not _leaks(out, walker.found):
                return out
            fallback = fallback or out
    if fallback is not None:
        # A secret string that is also a non-secret value elsewhere (a username equal to the
        # password): the emitted data is exactly the redacted structure, so it stays.
        return fallback
    # Neither form parses back to the redacted structure (a type our emitters cannot write):
    # keep no content rather than risk a leak.
    return REEMITTED_NOTE.replace("re-emitted from the parsed file", "content withheld")


def redact_file(path: str, text: str) -> str:
    return redact_document(text, kind_for(path, text))


def redact_command_output(argv: Sequence[str], text: str) -> str:
    """`containerd ... config dump` prints TOML: redacted structurally; anything else as text."""
    if len(argv) >= 2 and list(argv[-2:]) == ["config", "dump"] and text.strip():
        return redact_document(text, "toml")
    return redact_text(text)
