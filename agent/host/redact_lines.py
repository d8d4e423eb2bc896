"""Line-level redaction for any text: a file that does not parse, command output, the kernel
log; also the first candidate for a document that does (it keeps layout and comments).

A field whose key names a secret (agent/host/redact_secrets.py) has its value replaced,
including multi-line TOML strings, YAML block scalars and multi-line arrays or tables under it;
every other line keeps its bytes except the secrets that can sit inside any string.
"""
import re
from typing import List, Tuple

from agent.host.redact_secrets import (
    _PEM_PRIVATE,
    REDACTED,
    _pem_sub,
    is_secret_name,
    redact_inline,
)

# A line with none of these cannot hold anything the line rules replace (every secret name
# contains one; see _SECRET_WORDS in agent/host/redact_secrets.py): skipped cheaply (dpkg's
# status file is 20,000 lines).
_HINT = re.compile(
    r"pass|secret|token|auth|cred|api|access|priv|sign|encrypt|ssh|key|session|cookie|bearer|"
    r"activation|basic|://|LS0tLS1CRUdJTi",
    re.IGNORECASE,
)

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
