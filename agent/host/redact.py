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

Here: the structural walk and the documents. What names a secret and the in-string rules are in
agent/host/redact_secrets.py, the line rules in agent/host/redact_lines.py, the TOML emitter in
agent/host/redact_toml.py.
"""
import functools
import json
import math
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

import yaml

from agent.host.redact_lines import redact_text
from agent.host.redact_secrets import REDACTED, is_secret_name, redact_inline
from agent.host.redact_toml import emit_toml

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised by the 3.9 unit run
    import tomli as tomllib

# The header a re-emitted file starts with, so a reader knows comments and layout are gone.
REEMITTED_NOTE = "# redacted by gpu-node-agent collect: re-emitted from the parsed file\n"
MAX_NODES = 200_000  # values walked per document: a YAML alias bomb must not expand forever

# Kept for callers of the first version: text-level redaction.
redact = redact_text


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
