"""The scalar and container checks behind agent/safeio/schema.py: each takes a value parsed
from YAML (or given in Python) and returns it as the declared type, or raises Invalid with a
message. The conversions are the ones pydantic 2's lax mode made for the config and policy
files (pydantic docs, "Conversion Table"), so every file it accepted is still accepted with the
same values and every file it refused is still refused, with the same words.
"""
import datetime
import math
import re
import typing
from typing import Any, Callable, Dict, List, Optional, Tuple

Loc = Tuple[Any, ...]
Check = Callable[[Any], Any]


class Invalid(Exception):
    """One refusal: the location below the value checked (field names, list indexes, dict
    keys) and pydantic's wording of the problem."""

    def __init__(self, msg: str, loc: Loc = ()) -> None:
        super().__init__(msg)
        self.msg = msg
        self.loc = loc


class Errors(Exception):
    """Several refusals of one record, in field order (a record reports every bad field)."""

    def __init__(self, errors: List[Invalid]) -> None:
        super().__init__(errors[0].msg)
        self.errors = errors


def refusals(exc: Exception, where: Loc = ()) -> List[Invalid]:
    """An Invalid or an Errors as its refusals, each located under ``where`` (the list index,
    dict key or field name the failed check was applied at)."""
    found: List[Any] = list(exc.errors) if isinstance(exc, Errors) else [exc]
    return [Invalid(e.msg, where + e.loc) for e in found]


_TRUE = frozenset(("1", "on", "t", "true", "y", "yes"))
_FALSE = frozenset(("0", "off", "f", "false", "n", "no"))
_INT_TEXT = re.compile(r"^[+-]?[0-9](?:_?[0-9])*(?:\.0*)?$")
_DATE_TEXT = re.compile(r"^([0-9]{4})-([0-9]{2})-([0-9]{2})$")


def check_str(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            raise Invalid("Input should be a valid string, unable to parse raw data as a unicode "
                          "string") from None
    raise Invalid("Input should be a valid string")


def _text(value: Any) -> Optional[str]:
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return None
    return value if isinstance(value, str) else None


def check_int(value: Any) -> int:
    if isinstance(value, int):
        return int(value)  # True is 1, as pydantic's lax mode has it
    if isinstance(value, float):
        if not math.isfinite(value):
            raise Invalid("Input should be a finite number")
        if value != int(value):
            raise Invalid("Input should be a valid integer, got a number with a fractional part")
        return int(value)
    text = _text(value)
    if text is not None:
        text = text.strip()
        if _INT_TEXT.match(text):
            return int(text.split(".")[0].replace("_", ""))
        raise Invalid("Input should be a valid integer, unable to parse string as an integer")
    raise Invalid("Input should be a valid integer")


def check_strict_int(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise Invalid("Input should be a valid integer")


def check_float(value: Any) -> float:
    if isinstance(value, (int, float)):
        return float(value)
    text = _text(value)
    if text is not None:
        try:
            return float(text.strip())  # float() takes "1_0", "inf" and "nan" as pydantic does
        except ValueError:
            raise Invalid("Input should be a valid number, unable to parse string as a "
                          "number") from None
    raise Invalid("Input should be a valid number")


def check_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    text = _text(value)
    if text is not None:
        low = text.lower()
        if low in _TRUE or low in _FALSE:
            return low in _TRUE
    if isinstance(value, (int, str, bytes)) or (isinstance(value, float) and value.is_integer()):
        raise Invalid("Input should be a valid boolean, unable to interpret input")
    raise Invalid("Input should be a valid boolean")


def check_date(value: Any) -> datetime.date:
    if isinstance(value, datetime.datetime):
        if value.time() != datetime.time(0):
            raise Invalid("Datetimes provided to dates should have zero time - e.g. be exact "
                          "dates")
        return value.date()
    if isinstance(value, datetime.date):
        return value
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # a Unix time, as pydantic took it
    if isinstance(value, int) and not isinstance(value, bool):
        day = 86_400_000 if abs(value) > 20_000_000_000 else 86_400  # pydantic: beyond, ms
        if value % day:
            raise Invalid("Datetimes provided to dates should have zero time - e.g. be exact "
                          "dates")
        try:
            return datetime.date(1970, 1, 1) + datetime.timedelta(days=value // day)
        except OverflowError:
            raise Invalid("Input should be a valid date") from None
    text = _text(value)
    match = _DATE_TEXT.match(text) if text is not None else None
    if match:
        try:
            return datetime.date(*(int(g) for g in match.groups()))
        except ValueError:
            pass
    raise Invalid("Input should be a valid date")


def literal(choices: Tuple[Any, ...]) -> Check:
    words = [repr(c) for c in choices]
    said = words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]

    def check(value: Any) -> Any:
        for choice in choices:
            # True == 1 in Python; a literal matches its own type only, as pydantic's does.
            if type(value) is type(choice) and value == choice:
                return choice
        raise Invalid(f"Input should be {said}")
    return check


def optional(inner: Check) -> Check:
    def check(value: Any) -> Any:
        return None if value is None else inner(value)
    return check


def list_of(item: Check) -> Check:
    def check(value: Any) -> List[Any]:
        if not isinstance(value, (list, tuple, set, frozenset)):
            raise Invalid("Input should be a valid list")
        out, errors = [], []
        for i, entry in enumerate(value):
            try:
                out.append(item(entry))
            except (Invalid, Errors) as exc:
                errors += refusals(exc, (i,))
        if errors:
            raise Errors(errors)
        return out
    return check


def dict_of(key: Check, item: Check) -> Check:
    def check(value: Any) -> Dict[Any, Any]:
        if not isinstance(value, dict):
            raise Invalid("Input should be a valid dictionary")
        out, errors = {}, []
        for k, v in value.items():
            try:
                good = key(k)
            except Invalid as exc:  # the value is checked too: both are reported
                errors.append(Invalid(exc.msg, (k, "[key]")))
                good = k
            try:
                out[good] = item(v)
            except (Invalid, Errors) as exc:
                errors += refusals(exc, (k,))
        if errors:
            raise Errors(errors)
        return out
    return check


def union(members: List[Check]) -> Check:
    def check(value: Any) -> Any:
        problems = []
        for member in members:
            try:
                return member(value)
            except (Invalid, Errors) as exc:
                problems.append(str(exc))
        raise Invalid("; ".join(problems))
    return check


def _num(bound: Any) -> str:
    return str(int(bound)) if isinstance(bound, float) and bound.is_integer() else str(bound)


def bounded(inner: Check, ge: Any = None, gt: Any = None, le: Any = None, lt: Any = None,
            min_length: Optional[int] = None, pattern: Optional[str] = None) -> Check:
    # pydantic matches patterns with Rust's regex, where `$` is the end of the text: `\Z` here.
    rx = re.compile(pattern[:-1] + r"\Z" if pattern and pattern.endswith("$") else pattern) \
        if pattern else None

    def check(value: Any) -> Any:
        value = inner(value)
        if value is None:
            return value
        if ge is not None and not value >= ge:
            raise Invalid(f"Input should be greater than or equal to {_num(ge)}")
        if gt is not None and not value > gt:
            raise Invalid(f"Input should be greater than {_num(gt)}")
        if le is not None and not value <= le:
            raise Invalid(f"Input should be less than or equal to {_num(le)}")
        if lt is not None and not value < lt:
            raise Invalid(f"Input should be less than {_num(lt)}")
        if min_length is not None and len(value) < min_length:
            if isinstance(value, str):
                raise Invalid(f"String should have at least {min_length} character"
                              + ("s" if min_length != 1 else ""))
            raise Invalid(f"List should have at least {min_length} item"
                          + ("s" if min_length != 1 else "")
                          + f" after validation, not {len(value)}")
        if rx is not None and not rx.search(value):
            raise Invalid(f"String should match pattern '{pattern}'")
        return value
    return check


def check_for(hint: Any, strict: bool = False, bounds: Optional[Dict[str, Any]] = None) -> Check:
    """The check of one annotation, with ``bounds`` (``bounded``'s arguments) applied to it.
    A record class (agent/safeio/schema.py) brings its own check, ``_coerce``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Annotated:
        meta = next((m for m in args[1:] if hasattr(m, "bounds")), None)
        return check_for(args[0], bool(meta and meta.strict), meta.bounds if meta else None)
    check: Check
    if isinstance(hint, type) and hasattr(hint, "_coerce"):
        check = hint._coerce
    elif hint is int and strict:
        check = check_strict_int
    elif hint in _SCALARS:
        check = _SCALARS[hint]
    elif hint is typing.Any:
        check = _identity
    elif origin is typing.Literal:
        check = literal(args)
    elif origin is typing.Union:
        members = [a for a in args if a is not type(None)]
        inner = check_for(members[0]) if len(members) == 1 else union(
            [check_for(m) for m in members])
        check = optional(inner) if len(members) < len(args) else inner
    elif origin is list:
        check = list_of(check_for(args[0]))
    elif origin is dict:
        check = dict_of(check_for(args[0]), check_for(args[1]))
    else:
        raise TypeError(f"schema: no check for the annotation {hint!r}")
    return bounded(check, **bounds) if bounds else check


def _identity(value: Any) -> Any:
    return value


_SCALARS: Dict[Any, Check] = {str: check_str, int: check_int, float: check_float,
                              bool: check_bool, datetime.date: check_date}
