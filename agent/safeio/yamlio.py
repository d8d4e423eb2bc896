"""YAML loading through libyaml's C loader when PyYAML was built with it (the pure-Python
loader costs ~30 ms per small file, most of a one-shot `check` on a bundle), bounded.

Every load first walks the parser's *events* (a flat stream; libyaml's parser is not
recursive) and refuses, before anything is composed or constructed:

- nesting deeper than ``max_depth``: libyaml's composer in PyYAML's C extension recurses once
  per level and overflows the C stack (a segfault, not an exception) on a few thousand ``[``;
  the pure-Python composer raises RecursionError;
- more than ``max_nodes`` nodes once aliases are expanded (the "billion laughs" alias bomb,
  https://en.wikipedia.org/wiki/Billion_laughs_attack): PyYAML shares an aliased object, so
  loading is cheap, but every consumer that walks or serialises the result pays the expanded
  size (the red-team run reached 2.2 GB);
- an alias to a collection that is still open (a recursive structure, which never ends when
  walked);
- an integer scalar longer than ``MAX_INT_CHARS``: CPython's str-to-int conversion is
  quadratic in the number of digits and, since 3.11, refuses more than 4300 digits with a
  ValueError (https://docs.python.org/3/library/stdtypes.html#int-max-str-digits).

Anything the loader raises (YAML errors, ValueError from a bad timestamp, TypeError from an
unhashable key, ...) becomes :class:`YamlError`: a ParseError (our one-line error type) that is
also a ``yaml.YAMLError``, so callers that format ``problem``/``problem_mark`` keep working.
"""
import copy
import re
import threading
from collections import OrderedDict
from typing import Any, Dict, Iterator, List, Optional, Set, Tuple

import yaml

from agent.errors import ParseError

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

MAX_DEPTH = 64  # no config, bundle file or CDI spec nests half as deep
# Expanded nodes; a CDI spec for 8 GPUs with MIG is a few thousand, a bundle's commands.yaml
# ~2,000. Loading costs ~500 bytes a node (the composed node, its two marks, the object):
# 100,000 took `check --bundle` to 90 MiB peak RSS here, so 50,000 (~60 MiB, under the
# unit's 128 MiB).
MAX_NODES = 50_000
MAX_INT_CHARS = 640  # far past any real integer (a u64 is 20 digits), far below 4300

# The YAML 1.1 int forms PyYAML's resolver recognises (yaml/resolver.py), loosely: a scalar
# that is long and looks like one is refused whatever the resolver would have made of it.
_INTLIKE = re.compile(r"[-+]?(?:0b[01_]+|0x[0-9a-fA-F_]+|[0-9][0-9_:]*)")
_INT_TAG = "tag:yaml.org,2002:int"

# safe_load's results by (text, limits), most recent last: in one run four checks parse the
# same CDI spec (checks/containerd/cdi_specs.py), 1 ms each on libyaml, and `run` parses it
# again every cycle. A hit hands out a deep copy (a caller may change what it got; deepcopy
# keeps an alias's sharing as PyYAML built it), ~0.1 ms. Bounded by the texts' length: small
# files only, and the least recently used dropped past the total (a parsed CDI spec holds
# ~6x its text, so at most ~1 MiB in all; what one `run` cycle parses is a few dozen KiB).
MEMO_TEXT_MAX = 64 * 1024
MEMO_TOTAL_MAX = 128 * 1024
_memo: "OrderedDict[Tuple[str, int, int], Any]" = OrderedDict()
_memo_chars = 0
_memo_lock = threading.Lock()


class YamlError(ParseError, yaml.YAMLError):
    """One line; ``problem`` and ``problem_mark`` as PyYAML's MarkedYAMLError has them."""

    def __init__(self, problem: str, mark: Any = None) -> None:
        where = f"line {mark.line + 1}: " if mark is not None else ""
        super().__init__(f"{where}{problem}")
        self.problem = problem
        self.problem_mark = mark


class _Line:
    """A mark with only a line (0-based, as PyYAML's Mark), for errors that carry a position."""

    def __init__(self, line: int) -> None:
        self.line = line


def _mark(exc: BaseException, text: str) -> Any:
    mark = getattr(exc, "problem_mark", None)
    if mark is not None:
        return mark
    position = getattr(exc, "position", None)  # ReaderError: a character offset
    if isinstance(position, int) and 0 <= position <= len(text):
        return _Line(text.count("\n", 0, position))
    return None


def _first_line(exc: BaseException) -> str:
    problem = getattr(exc, "problem", None) or getattr(exc, "reason", None)
    if isinstance(problem, str) and problem:
        return problem
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


def _check_events(text: str, max_depth: int, max_nodes: int) -> None:
    loader = _Loader(text)
    try:
        stack: List[Tuple[Optional[str], int]] = []
        open_anchors: Set[str] = set()
        sizes: Dict[str, int] = {}
        total = 0
        while loader.check_event():
            ev = loader.get_event()
            mark = getattr(ev, "start_mark", None)
            if isinstance(ev, yaml.ScalarEvent):
                total += 1
                value = ev.value
                if (
                    len(value) > MAX_INT_CHARS
                    # plain style: None from the Python parser, "" from libyaml
                    and (ev.tag == _INT_TAG or (ev.implicit[0] and not ev.style))
                    and _INTLIKE.fullmatch(value)
                ):
                    raise YamlError(f"an integer longer than {MAX_INT_CHARS} digits", mark)
                if ev.anchor:
                    sizes[ev.anchor] = 1
            elif isinstance(ev, yaml.AliasEvent):
                if ev.anchor in open_anchors:
                    raise YamlError(f"alias *{ev.anchor} refers to its own enclosing node", mark)
                total += sizes.get(ev.anchor, 1)
            elif isinstance(ev, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
                total += 1
                stack.append((ev.anchor, total))
                if len(stack) > max_depth:
                    raise YamlError(f"nested deeper than {max_depth} levels", mark)
                if ev.anchor:
                    open_anchors.add(ev.anchor)
            elif isinstance(ev, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
                anchor, start = stack.pop()
                if anchor:
                    sizes[anchor] = total - start + 1
                    open_anchors.discard(anchor)
            elif isinstance(ev, yaml.DocumentEndEvent):
                sizes.clear()  # anchors are per document (the composer resets them too)
            if total > max_nodes:
                raise YamlError(
                    f"more than {max_nodes} nodes once aliases are expanded",
                    mark,
                )
    finally:
        loader.dispose()


def _guarded(text: Any, max_depth: int, max_nodes: int) -> None:
    if not isinstance(text, str):
        raise YamlError(f"expected text, got {type(text).__name__}")
    try:
        _check_events(text, max_depth, max_nodes)
    except YamlError:
        raise
    except yaml.YAMLError as exc:
        raise YamlError(_first_line(exc), _mark(exc, text)) from None
    except Exception as exc:  # the reader's own errors on odd input: still one line
        raise YamlError(_first_line(exc)) from None


def safe_load(text: str, max_depth: int = MAX_DEPTH, max_nodes: int = MAX_NODES) -> Any:
    """The one document in ``text`` (None when empty). Raises YamlError, nothing else, on
    any input."""
    global _memo_chars
    key = (text, max_depth, max_nodes) if isinstance(text, str) else None
    if key is not None and len(text) <= MEMO_TEXT_MAX:
        with _memo_lock:
            hit = key in _memo
            if hit:
                _memo.move_to_end(key)
                kept = _memo[key]
        if hit:
            return copy.deepcopy(kept)
    data = _load_single(text, max_depth, max_nodes)
    if key is not None and len(text) <= MEMO_TEXT_MAX:
        kept = copy.deepcopy(data)
        with _memo_lock:
            if key not in _memo:
                _memo[key] = kept
                _memo_chars += len(text)
            while _memo_chars > MEMO_TOTAL_MAX:
                old, _ = _memo.popitem(last=False)
                _memo_chars -= len(old[0])
    return data


def _load_single(text: str, max_depth: int, max_nodes: int) -> Any:
    _guarded(text, max_depth, max_nodes)
    loader = _Loader(text)
    try:
        return loader.get_single_data()
    except yaml.YAMLError as exc:
        raise YamlError(_first_line(exc), _mark(exc, text)) from None
    except Exception as exc:  # ValueError (timestamps), TypeError (unhashable keys), ...
        raise YamlError(_first_line(exc)) from None
    finally:
        loader.dispose()


def safe_load_all(
    text: str, max_depth: int = MAX_DEPTH, max_nodes: int = MAX_NODES
) -> Iterator[Any]:
    """Every document in ``text``, with the same limits (counted over the whole stream)."""
    _guarded(text, max_depth, max_nodes)
    loader = _Loader(text)
    try:
        docs = []
        while loader.check_data():
            docs.append(loader.get_data())
    except yaml.YAMLError as exc:
        raise YamlError(_first_line(exc), _mark(exc, text)) from None
    except Exception as exc:
        raise YamlError(_first_line(exc)) from None
    finally:
        loader.dispose()
    return iter(docs)
