"""A TOML 1.0 emitter for the subset ``tomllib`` returns, so a structurally redacted TOML file
(a containerd config, a `containerd config dump`) can be written back and parsed again to
exactly the redacted data (agent/host/redact.py). The standard library reads TOML only.
Spelling: https://toml.io/en/v1.0.0 (keys, basic strings and their escapes, inline tables).
"""
import datetime
import math
import re
from typing import Any, Dict, List

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


def emit_toml(data: Dict[str, Any]) -> str:
    """TOML 1.0 text that tomllib parses back to ``data``: scalars and arrays (inline) first in
    each table, then each sub-table under its own ``[a."b.c"]`` header."""
    lines: List[str] = []

    def table(path: List[str], tbl: Dict[str, Any]) -> None:
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
