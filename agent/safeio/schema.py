"""Declared records for the config, policy and web-config files, validated as they are read.

A record is a class with annotated fields (str, int, float, bool, datetime.date, Optional,
List, Dict, Literal, Union, Annotated[..., Field(...)], and nested records), defaults, and
``Field(...)`` constraints (ge/gt/le/lt, min_length, pattern, alias, strict ints). Unknown keys
are refused: a typo in a file must not silently do nothing. A refused input raises
ValidationError, carrying every problem's location (a tuple path) and message, so the command
line can print one line naming the file and the field. Values convert as pydantic 2's lax mode
converted them (agent/safeio/coerce.py); docs/decisions.md, "Config and policy validation
without pydantic", says why the agent no longer uses pydantic and what this does not do.

Cheap by design: a class costs a dict of its fields when declared, and the checks of its
fields are built on the first validation, from the annotations (typing.get_origin/get_args).
"""
import copy
import typing
from typing import Any, Callable, ClassVar, Dict, List, Optional, Set, Tuple, Type, TypeVar

from agent.errors import ParseError
from agent.safeio import coerce
from agent.safeio.coerce import Check, Errors, Invalid, refusals

__all__ = ["Field", "Record", "ValidationError", "field_validator", "model_validator"]

F = TypeVar("F")
R = TypeVar("R", bound="Record")


class ValidationError(ParseError):
    """Every problem of one validation: ``errors()`` lists {"loc": tuple, "msg": str}, the
    first one in field order first. A ParseError (a ValueError): the caller names the file
    and raises ConfigError; one that reaches the command line unmapped is internal (3)."""

    def __init__(self, title: str, problems: List[Invalid]) -> None:
        self.title = title
        self._problems = problems
        lines = [f"{len(problems)} validation error{'s' if len(problems) > 1 else ''} for {title}"]
        for p in problems:
            lines += [".".join(str(part) for part in p.loc) or "(top level)", f"  {p.msg}"]
        super().__init__("\n".join(lines))

    def errors(self) -> List[Dict[str, Any]]:
        return [{"loc": p.loc, "msg": p.msg} for p in self._problems]

    def error_count(self) -> int:
        return len(self._problems)


class FieldInfo:
    __slots__ = ("default", "alias", "strict", "bounds")

    def __init__(self, default: Any, alias: Optional[str], strict: bool,
                 bounds: Dict[str, Any]) -> None:
        self.default, self.alias, self.strict, self.bounds = default, alias, strict, bounds


_REQUIRED = object()


def Field(default: Any = _REQUIRED, *, alias: Optional[str] = None, strict: bool = False,
          **bounds: Any) -> Any:
    """A field's default and constraints (ge, gt, le, lt, min_length, pattern), pydantic's
    spelling; ``strict=True`` takes an int as an int only (not "7", 7.0 or True)."""
    return FieldInfo(default, alias, strict, bounds)


def field_validator(*names: str, mode: str = "after") -> Callable[[F], F]:
    """A check of the named fields: ``fn(cls, value)`` returns the value or raises ValueError
    (the field's error). ``mode="before"`` sees the raw value, "after" the converted one."""
    def mark(fn: F) -> F:
        func: Any = getattr(fn, "__func__", fn)
        func._schema_fields = (names, mode)
        return fn
    return mark


def model_validator(mode: str = "after") -> Callable[[F], F]:
    """A check of the whole record once every field is set: ``fn(self)`` returns self or
    raises ValueError (the record's error, at the record's location)."""
    def mark(fn: F) -> F:
        fn._schema_record = mode  # type: ignore[attr-defined]
        return fn
    return mark


class _Spec:
    """A field: its name, the key in the file, its default, its check (built lazily)."""

    __slots__ = ("name", "key", "default", "hint", "info", "check", "before", "after")

    def __init__(self, name: str, hint: Any, info: FieldInfo) -> None:
        self.name, self.hint, self.info = name, hint, info
        self.key = info.alias or name
        self.default = info.default
        self.check: Optional[Check] = None
        self.before: List[Callable[..., Any]] = []
        self.after: List[Callable[..., Any]] = []


class Record:
    """Subclass with annotated fields; ``class X(Record, frozen=True)`` refuses assignment."""

    _fields: ClassVar[Dict[str, _Spec]] = {}
    _record_checks: ClassVar[List[Callable[..., Any]]] = []
    _frozen: ClassVar[bool] = False
    _built: ClassVar[bool] = False
    model_fields_set: Set[str]

    def __init_subclass__(cls, frozen: Optional[bool] = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if frozen is not None:
            cls._frozen = frozen
        fields = {name: copy.copy(spec) for name, spec in cls._fields.items()}
        for name, hint in cls.__dict__.get("__annotations__", {}).items():
            if typing.get_origin(hint) is ClassVar or name == "model_fields_set":
                continue
            value = cls.__dict__.get(name, _REQUIRED)
            info = value if isinstance(value, FieldInfo) else FieldInfo(value, None, False, {})
            fields[name] = _Spec(name, hint, info)
            if isinstance(value, FieldInfo) and info.default is not _REQUIRED:
                setattr(cls, name, info.default)
        cls._fields = fields
        cls._built = False

    @classmethod
    def _build(cls) -> None:
        """The fields' checks and validators, once, on the first validation. Built aside and
        then set whole: a thread validating meanwhile never sees a half-filled list."""
        before: Dict[str, List[Callable[..., Any]]] = {name: [] for name in cls._fields}
        after: Dict[str, List[Callable[..., Any]]] = {name: [] for name in cls._fields}
        records: List[Callable[..., Any]] = []
        for klass in reversed(cls.__mro__):
            for attr in vars(klass).values():
                func = getattr(attr, "__func__", attr)
                names, mode = getattr(func, "_schema_fields", ((), ""))
                for name in names:
                    (before if mode == "before" else after)[name].append(func)
                if getattr(func, "_schema_record", None) and func not in records:
                    records.append(func)
        for spec in cls._fields.values():
            spec.check = coerce.check_for(spec.hint, spec.info.strict, spec.info.bounds)
            spec.before, spec.after = before[spec.name], after[spec.name]
        cls._record_checks = records
        cls._built = True

    def __init__(self, **data: Any) -> None:
        self._fill(data)

    @classmethod
    def model_validate(cls: Type[R], data: Any) -> R:
        """``data`` (a mapping, or an instance) as a record; ValidationError when refused."""
        try:
            return cls._coerce(data)
        except (Invalid, Errors) as exc:
            raise ValidationError(cls.__name__, refusals(exc)) from None

    @classmethod
    def _coerce(cls: Type[R], data: Any) -> R:
        if isinstance(data, cls):
            return data
        if not isinstance(data, dict):
            raise Invalid(f"Input should be a valid dictionary or instance of {cls.__name__}")
        record = cls.__new__(cls)
        record._fill_checked(data)
        return record

    def _fill(self, data: Dict[str, Any]) -> None:
        try:
            self._fill_checked(data)
        except (Invalid, Errors) as exc:
            raise ValidationError(type(self).__name__, refusals(exc)) from None

    def _fill_checked(self, data: Dict[str, Any]) -> None:
        cls = type(self)
        if not cls._built:
            cls._build()
        errors: List[Invalid] = []
        given: Set[str] = set()
        values: Dict[str, Any] = {}
        for spec in cls._fields.values():
            key = spec.key if spec.key in data else spec.name
            if key not in data:
                if spec.default is _REQUIRED:
                    errors.append(Invalid("Field required", (spec.key,)))
                else:
                    values[spec.name] = _fresh(spec.default)
                continue
            given.add(spec.name)
            try:
                values[spec.name] = _field_value(cls, spec, data[key])
            except (Invalid, Errors) as exc:
                errors += refusals(exc, (spec.key,))
        used = {spec.key if spec.key in data else spec.name for spec in cls._fields.values()}
        errors += [Invalid("Extra inputs are not permitted" if isinstance(key, str) else
                           "Keys should be strings", (key,)) for key in data if key not in used]
        if errors:
            raise Errors(errors)
        values["model_fields_set"] = given  # kept out of ==, hash, repr and model_dump
        object.__setattr__(self, "__dict__", values)
        for check in cls._record_checks:
            try:
                check(self)
            except (ValueError, AssertionError) as exc:
                raise Invalid(_value_error(exc)) from None

    def __setattr__(self, name: str, value: Any) -> None:
        if self._frozen:
            raise ValidationError(type(self).__name__, [Invalid("Instance is frozen", (name,))])
        object.__setattr__(self, name, value)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Record) or type(other) is not type(self):
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        if not self._frozen:
            raise TypeError(f"unhashable type: {type(self).__name__!r}")
        return hash((type(self), self._values()))

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={getattr(self, k)!r}" for k in type(self)._fields)
        return f"{type(self).__name__}({inner})"

    def _values(self) -> Tuple[Any, ...]:
        return tuple(getattr(self, name) for name in type(self)._fields)

    def model_dump(self, mode: str = "python") -> Dict[str, Any]:
        """The fields as plain data, nested records as dicts (``mode="json"``: dates as ISO
        text, dict keys as text)."""
        return {name: _dump(getattr(self, name), mode) for name in type(self)._fields}

    def model_copy(self: R, update: Optional[Dict[str, Any]] = None) -> R:
        """A shallow copy with ``update`` set as given (not validated, as pydantic's)."""
        twin = type(self).__new__(type(self))
        values = {**self.__dict__, **(update or {})}
        values["model_fields_set"] = self.model_fields_set | set(update or {})
        object.__setattr__(twin, "__dict__", values)
        return twin


def _fresh(default: Any) -> Any:
    """A default of its own for each record (a list or dict default is never shared)."""
    if isinstance(default, (list, dict)) or (isinstance(default, Record) and not default._frozen):
        return copy.deepcopy(default)
    return default


def _value_error(exc: Exception) -> str:
    if isinstance(exc, AssertionError):
        return f"Assertion failed, {exc}"
    return f"Value error, {exc}"


def _field_value(cls: type, spec: _Spec, value: Any) -> Any:
    try:
        for fn in spec.before:
            value = fn(cls, value)
        assert spec.check is not None
        value = spec.check(value)
        for fn in spec.after:
            value = fn(cls, value)
    except (ValueError, AssertionError) as exc:
        raise Invalid(_value_error(exc)) from None
    return value


def _dump(value: Any, mode: str) -> Any:
    if isinstance(value, Record):
        return value.model_dump(mode)
    if isinstance(value, list):
        return [_dump(v, mode) for v in value]
    if isinstance(value, dict):
        return {(str(k) if mode == "json" else k): _dump(v, mode) for k, v in value.items()}
    if mode == "json" and hasattr(value, "isoformat"):
        return value.isoformat()
    return value

