"""``record``: the agent's value classes, as ``dataclasses.dataclass`` makes them, without its
start-up cost.

Why not dataclasses: it writes each class's ``__init__``, ``__repr__``, ``__eq__``, ``__hash__``
and ``__setattr__`` as source text and compiles it when the class is created
(CPython Lib/dataclasses.py, ``_FuncBuilder``/``_create_fn``), and importing it imports
``inspect`` (and with it ``ast``, ``dis``, ``tokenize``). On the bench machine that was about 1 ms
a class, 39 ms for the 37 classes a one-shot ``check`` creates, plus ~10 ms of imports: a
quarter of the command's CPU (bench/bench_footprint.py, docs/decisions.md). The methods here
are closures over each class's field list, built without compiling anything.

What a record does is what a dataclass does with the options the agent uses (``frozen`` or
not; ``field(default=..., default_factory=...)``; ``__post_init__``; ``replace``), so mypy
checks records as dataclasses (the ``TYPE_CHECKING`` branch at the end): fields in annotation
order, base records' fields first; a ``ClassVar`` annotation is no field; ``__eq__`` compares
the fields as a tuple, only with the same class; a frozen record hashes that tuple and refuses
assignment and deletion, a mutable one is unhashable unless its body defines ``__hash__``.
A default whose type is unhashable (a list, a dict, a set, a mappingproxy) is refused as
Python 3.11's dataclasses refuse it, on every interpreter, so no version accepts what another
refuses; such a default needs ``default_factory``.
"""
import typing
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Tuple, TypeVar

__all__ = ["MISSING", "Field", "FrozenInstanceError", "field", "fields", "is_record", "record",
           "replace"]

T = TypeVar("T")

_MISSING: Any = type("_Missing", (), {"__repr__": lambda self: "MISSING"})()
# 3.11's rule (Lib/dataclasses.py, _process_class: "mutable default ... is not allowed"),
# plus the types 3.9/3.10 refused by name and the mappingproxy 3.11 refused as unhashable
_REFUSED_DEFAULTS = (list, dict, set, bytearray, MappingProxyType)
_REQUIRED, _DEFAULT, _FACTORY = 0, 1, 2


class FrozenInstanceError(AttributeError):
    """An assignment to a frozen record (dataclasses.FrozenInstanceError is an AttributeError
    too, so callers catching that catch this)."""


class Field:
    """One field: its name, and its default or default factory (``_MISSING`` when none)."""

    __slots__ = ("name", "default", "default_factory")

    def __init__(self, default: Any = _MISSING, default_factory: Any = _MISSING) -> None:
        if default is not _MISSING and default_factory is not _MISSING:
            raise ValueError("cannot specify both default and default_factory")
        self.name = ""
        self.default = default
        self.default_factory = default_factory

    def __repr__(self) -> str:
        return f"Field(name={self.name!r}, default={self.default!r})"


def _field(*, default: Any = _MISSING, default_factory: Any = _MISSING) -> Any:
    return Field(default, default_factory)


def _is_classvar(annotation: Any) -> bool:
    if isinstance(annotation, str):  # `from __future__ import annotations`: the text
        return annotation.startswith(("ClassVar", "typing.ClassVar"))
    return annotation is typing.ClassVar or typing.get_origin(annotation) is typing.ClassVar


def _own_fields(cls: type) -> Tuple[Field, ...]:
    annotations = cls.__dict__.get("__annotations__")
    if annotations is None and "__annotate__" in cls.__dict__:  # 3.14 (PEP 649): lazy
        annotations = cls.__annotations__
    out = []
    for name, annotation in (annotations or {}).items():
        if _is_classvar(annotation):
            continue
        value = cls.__dict__.get(name, _MISSING)
        spec = value if isinstance(value, Field) else Field(default=value)
        spec.name = name
        if spec.default is not _MISSING and (isinstance(spec.default, _REFUSED_DEFAULTS)
                                            or type(spec.default).__hash__ is None):
            raise ValueError(f"mutable default {type(spec.default)} for field {name} is not "
                             "allowed: use default_factory")
        if spec.default is _MISSING:
            if name in cls.__dict__:  # a field(default_factory=...) or a bare field()
                delattr(cls, name)
        else:
            setattr(cls, name, spec.default)  # as dataclasses leave it: the class attribute
        out.append(spec)
    return tuple(out)


def _all_fields(cls: type) -> Tuple[Field, ...]:
    by_name: Dict[str, Field] = {}
    for base in reversed(cls.__mro__[1:]):
        for spec in base.__dict__.get("__record_fields__", ()):
            by_name[spec.name] = spec
    for spec in _own_fields(cls):  # a field a base declared keeps the base's place
        by_name[spec.name] = spec
    return tuple(by_name.values())


def _make_init(cls: type, specs: Tuple[Field, ...]) -> Callable[..., None]:
    plan = tuple((s.name, _REQUIRED if s.default is _MISSING and s.default_factory is _MISSING
                  else _FACTORY if s.default is _MISSING else _DEFAULT,
                  s.default_factory if s.default is _MISSING else s.default) for s in specs)
    seen = False
    for name, kind, _ in plan:  # dataclasses' rule, so a positional call means one thing
        if kind == _REQUIRED and seen:
            raise TypeError(f"non-default argument {name!r} follows default argument")
        seen = seen or kind != _REQUIRED
    names = tuple(p[0] for p in plan)
    count = len(names)
    qualname = f"{cls.__qualname__}.__init__()"
    store = object.__setattr__  # frozen records too: dataclasses' __init__ does the same
    post_init = hasattr(cls, "__post_init__")

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if len(args) > count:
            raise TypeError(f"{qualname} takes {count + 1} positional arguments but "
                            f"{len(args) + 1} were given")
        for name, value in zip(names, args):
            if name in kwargs:
                raise TypeError(f"{qualname} got multiple values for argument {name!r}")
            store(self, name, value)
        for name, kind, default in plan[len(args):]:
            if name in kwargs:
                value = kwargs.pop(name)
            elif kind == _DEFAULT:
                value = default
            elif kind == _FACTORY:
                value = default()
            else:
                raise TypeError(f"{qualname} missing 1 required positional argument: {name!r}")
            store(self, name, value)
        if kwargs:
            raise TypeError(f"{qualname} got an unexpected keyword argument "
                            f"{next(iter(kwargs))!r}")
        if post_init:
            self.__post_init__()

    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    return __init__


def _make_methods(cls: type, names: Tuple[str, ...], frozen: bool) -> Dict[str, Any]:
    def values(self: Any) -> Tuple[Any, ...]:
        return tuple([getattr(self, n) for n in names])

    def __repr__(self: Any) -> str:
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in names)
        return f"{self.__class__.__qualname__}({inner})"

    def __eq__(self: Any, other: Any) -> Any:
        if other.__class__ is self.__class__:
            return values(self) == values(other)
        return NotImplemented

    methods: Dict[str, Any] = {"__repr__": __repr__, "__eq__": __eq__}
    explicit_hash = cls.__dict__.get("__hash__", _MISSING)
    if explicit_hash is not _MISSING and explicit_hash is not None:
        pass  # the body's own __hash__ stays (dataclasses: eq without frozen keeps it)
    elif frozen:
        methods["__hash__"] = lambda self: hash(values(self))
    else:
        methods["__hash__"] = None

    if frozen:
        def __setattr__(self: Any, name: str, value: Any) -> None:
            raise FrozenInstanceError(f"cannot assign to field {name!r}")

        def __delattr__(self: Any, name: str) -> None:
            raise FrozenInstanceError(f"cannot delete field {name!r}")

        methods["__setattr__"], methods["__delattr__"] = __setattr__, __delattr__
    for name, method in methods.items():
        if method is not None:
            method.__qualname__ = f"{cls.__qualname__}.{name}"
    return methods


def _process(cls: type, frozen: bool) -> type:
    specs = _all_fields(cls)
    cls.__record_fields__ = specs  # type: ignore[attr-defined]
    cls.__init__ = _make_init(cls, specs)  # type: ignore[misc]
    for name, method in _make_methods(cls, tuple(s.name for s in specs), frozen).items():
        if name in ("__repr__", "__eq__") and name in cls.__dict__:
            continue  # the body's own, as dataclasses keep them
        setattr(cls, name, method)
    return cls


def _record(cls: Optional[type] = None, *, frozen: bool = False) -> Any:
    if cls is None:
        return lambda c: _process(c, frozen)
    return _process(cls, frozen)


def _replace(obj: T, **changes: Any) -> T:
    """A copy of ``obj`` with ``changes`` (dataclasses.replace: every field passed to
    ``__init__`` again, so ``__post_init__`` runs on the copy)."""
    specs = getattr(type(obj), "__record_fields__", None)
    if specs is None:
        raise TypeError("replace() should be called on record instances")
    kwargs = {s.name: getattr(obj, s.name) for s in specs}
    unknown = [name for name in changes if name not in kwargs]
    if unknown:
        raise TypeError(f"{type(obj).__qualname__}.__init__() got an unexpected keyword "
                        f"argument {unknown[0]!r}")
    kwargs.update(changes)
    return type(obj)(**kwargs)


def _fields(class_or_instance: Any) -> Tuple[Field, ...]:
    specs = getattr(class_or_instance, "__record_fields__", None)
    if specs is None:
        raise TypeError("must be called with a record type or instance")
    return tuple(specs)


def is_record(obj: Any) -> bool:
    return hasattr(obj if isinstance(obj, type) else type(obj), "__record_fields__")


MISSING = _MISSING

if TYPE_CHECKING:  # mypy checks a record as the dataclass it behaves as (see the docstring)
    from dataclasses import dataclass as record
    from dataclasses import field as field
    from dataclasses import fields as fields
    from dataclasses import replace as replace
else:
    record, field, fields, replace = _record, _field, _fields, _replace
