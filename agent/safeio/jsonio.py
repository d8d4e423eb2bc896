"""Bounded JSON: the agent's one way to parse JSON it did not write itself in this process
(bundle files, CDI specs, state files, command output).

``json.loads`` alone fails in three ways on hostile input: nesting recurses once per level
(RecursionError at ~1000 levels, and any consumer that walks the result recursively fails
later), an integer literal of many digits costs quadratic time (CPython's str-to-int) and
raises ValueError past 4300 digits since 3.11
(https://docs.python.org/3/library/stdtypes.html#int-max-str-digits), and the input size is
whatever the caller read (and a 4 MiB file of small objects is ~500 MB of Python objects).
:func:`loads` bounds all of it (depth, values, integer length, size) and raises
:class:`JsonError` (our ParseError, one line naming the line number) on ANY input.
"""
import json
import re
from typing import Any, Union

from agent.errors import ParseError

MAX_DEPTH = 64
# Values (scalars and containers). A small dict costs ~200 bytes in CPython: 100,000 stay well
# inside the unit's 128 MiB; a GPU snapshot, a Node or a CDI spec has a few thousand.
MAX_VALUES = 100_000
MAX_INT_CHARS = 640  # see agent/safeio/yamlio.py
MAX_TEXT = 16 * 1024 * 1024

# A JSON string (RFC 8259 section 7). The closing quote is optional so an unterminated string
# ends the scan in one pass (linear: the two alternatives inside a string start with different
# characters, nothing backtracks).
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"?', re.S)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


class JsonError(ParseError):
    def __init__(self, problem: str, lineno: int = 0) -> None:
        super().__init__(f"line {lineno}: {problem}" if lineno else problem)
        self.problem = problem
        self.lineno = lineno


def _shape_ok(text: str, max_depth: int, max_values: int) -> None:
    """Nesting depth and value count, before json builds anything: strings blanked and
    brackets and commas counted at C speed; the depth walk then visits brackets only, at most
    ~2 x max_values of them."""
    bare = _STRING.sub('""', text)
    values = bare.count(",") + bare.count("[") + bare.count("{") + 1
    if values > max_values:
        raise JsonError(f"more than {max_values} values")
    depth = 0
    for ch in _NOT_BRACKET.sub("", bare):
        if ch in "[{":
            depth += 1
            if depth > max_depth:
                raise JsonError(f"nested deeper than {max_depth} levels")
        else:
            depth -= 1


def _int(text: str) -> int:
    if len(text) > MAX_INT_CHARS:
        raise JsonError(f"an integer longer than {MAX_INT_CHARS} digits")
    return int(text)


def loads(
    data: Union[str, bytes],
    max_depth: int = MAX_DEPTH,
    max_text: int = MAX_TEXT,
    max_values: int = MAX_VALUES,
) -> Any:
    """The value in ``data`` (text, or UTF-8 bytes). Raises JsonError, nothing else."""
    try:
        text = data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data
    except UnicodeDecodeError as exc:
        raise JsonError(f"not UTF-8 (byte {exc.start})") from None
    if not isinstance(text, str):
        raise JsonError(f"expected text, got {type(text).__name__}")
    if len(text) > max_text:
        raise JsonError(f"larger than {max_text} characters")
    _shape_ok(text, max_depth, max_values)
    try:
        return json.loads(text, parse_int=_int)
    except JsonError:
        raise
    except json.JSONDecodeError as exc:
        raise JsonError(f"invalid JSON ({exc.msg})", exc.lineno) from None
    except (ValueError, RecursionError, TypeError) as exc:
        raise JsonError(f"invalid JSON ({type(exc).__name__}: {str(exc)[:120]})") from None
