"""Bounded JSON: the agent's one way to parse JSON it did not write itself in this process
(bundle files, CDI specs, state files, command output).

``json.loads`` alone fails in three ways on hostile input: nesting recurses once per level
(RecursionError at ~1000 levels, and any consumer that walks the result recursively fails
later), an integer literal of many digits costs quadratic time (CPython's str-to-int) and
raises ValueError past 4300 digits since 3.11
(https://docs.python.org/3/library/stdtypes.html#int-max-str-digits), and the input size is
whatever the caller read. :func:`loads` bounds all three and raises :class:`JsonError` (our
ParseError, one line naming the line number) on ANY input.
"""
import json
import re
from typing import Any, Union

from agent.errors import ParseError

MAX_DEPTH = 64
MAX_INT_CHARS = 640  # see agent/yamlio.py
MAX_TEXT = 16 * 1024 * 1024

# A JSON string (RFC 8259 section 7) or one bracket: strings are skipped, brackets counted.
# The closing quote is optional so an unterminated string ends the scan in one pass (linear:
# the two alternatives inside a string start with different characters, nothing backtracks).
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"?|[\[\]{}]', re.S)


class JsonError(ParseError):
    def __init__(self, problem: str, lineno: int = 0) -> None:
        super().__init__(f"line {lineno}: {problem}" if lineno else problem)
        self.problem = problem
        self.lineno = lineno


def _depth_ok(text: str, max_depth: int) -> None:
    depth = 0
    for match in _TOKENS.finditer(text):
        tok = match.group()
        if tok in "[{":
            depth += 1
            if depth > max_depth:
                line = text.count("\n", 0, match.start()) + 1
                raise JsonError(f"nested deeper than {max_depth} levels", line)
        elif tok in "]}":
            depth -= 1


def _int(text: str) -> int:
    if len(text) > MAX_INT_CHARS:
        raise JsonError(f"an integer longer than {MAX_INT_CHARS} digits")
    return int(text)


def loads(
    data: Union[str, bytes], max_depth: int = MAX_DEPTH, max_text: int = MAX_TEXT
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
    _depth_ok(text, max_depth)
    try:
        return json.loads(text, parse_int=_int)
    except JsonError:
        raise
    except json.JSONDecodeError as exc:
        raise JsonError(f"invalid JSON ({exc.msg})", exc.lineno) from None
    except (ValueError, RecursionError, TypeError) as exc:
        raise JsonError(f"invalid JSON ({type(exc).__name__}: {str(exc)[:120]})") from None
