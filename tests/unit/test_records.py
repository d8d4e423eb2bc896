"""agent/records.py against the real thing: each class here is made twice, once by
``dataclasses.dataclass`` and once by ``record``, and every behaviour the agent relies on must
come out the same (the constructor's binding and its errors, defaults and factories,
``__post_init__``, repr, equality, hashing, frozenness, inheritance, ClassVar, ``replace``).
The expected values are dataclasses' own answers, computed in the same test.
"""
import copy
import dataclasses
import pickle
from types import MappingProxyType
from typing import ClassVar, Dict, List, Optional, Tuple

import pytest

from agent import records


def twins(body: str, frozen: bool = True, extra: str = ""):
    """The same class body as a dataclass and as a record: (dataclass class, record class)."""
    made = []
    for deco, ns in (("dataclasses.dataclass", {"dataclasses": dataclasses}),
                     ("records.record", {"records": records})):
        field = "dataclasses.field" if deco.startswith("dataclasses") else "records.field"
        ns.update(ClassVar=ClassVar, Dict=Dict, List=List, Optional=Optional, Tuple=Tuple)
        src = (f"@{deco}{'(frozen=True)' if frozen else ''}\nclass Thing:\n"
               + body.replace("FIELD", field) + "\n" + extra.replace("FIELD", field))
        exec(src, ns)  # noqa: S102 - test-local source
        made.append(ns["Thing"])
    return made[0], made[1]


BODY = """
    name: str
    count: int = 0
    tags: List[str] = FIELD(default_factory=list)
    labels: Dict[str, str] = FIELD(default_factory=dict)
    note: Optional[str] = None
    KIND: ClassVar[str] = "thing"
"""


def outcome(call):
    try:
        value = call()
    except Exception as e:  # noqa: BLE001 - the kind of failure is what is compared
        return ("raises", type(e).__name__)
    return ("value", value)


CALLS = [
    ((), {}),
    (("a",), {}),
    (("a", 3), {}),
    (("a", 3, ["x"], {"k": "v"}, "n"), {}),
    (("a", 3, ["x"], {"k": "v"}, "n", "extra"), {}),
    ((), {"name": "a", "note": "n"}),
    (("a",), {"name": "b"}),
    (("a",), {"bogus": 1}),
    ((), {"count": 1}),
]


@pytest.mark.parametrize("args,kwargs", CALLS)
@pytest.mark.parametrize("frozen", [True, False])
def test_the_constructor_binds_and_refuses_as_a_dataclass(args, kwargs, frozen):
    dc, rec = twins(BODY, frozen)
    want = outcome(lambda: repr(dc(*args, **kwargs)).replace("Thing(", "T("))
    got = outcome(lambda: repr(rec(*args, **kwargs)).replace("Thing(", "T("))
    assert got == want
    if want[0] == "value":  # the fields, by name, hold the same values
        a, b = dc(*args, **kwargs), rec(*args, **kwargs)
        assert {f.name: getattr(a, f.name) for f in dataclasses.fields(a)} == {
            f.name: getattr(b, f.name) for f in records.fields(b)}


def test_the_constructor_errors_name_the_field():
    _, rec = twins(BODY)
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'name'"):
        rec()
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        rec("a", bogus=1)
    with pytest.raises(TypeError, match="multiple values for argument 'name'"):
        rec("a", name="b")
    with pytest.raises(TypeError, match="takes 6 positional arguments but 7 were given"):
        rec("a", 1, [], {}, None, "x")


def test_factories_give_each_instance_its_own_value():
    _, rec = twins(BODY, frozen=False)
    one, two = rec("a"), rec("b")
    one.tags.append("x")
    assert two.tags == [] and one.tags == ["x"]


def test_class_attributes_are_left_as_dataclasses_leave_them():
    dc, rec = twins(BODY)
    for name in ("count", "note", "KIND", "tags", "labels", "name"):
        assert hasattr(rec, name) == hasattr(dc, name), name
        if hasattr(dc, name):
            assert getattr(rec, name) == getattr(dc, name)
    assert [f.name for f in records.fields(rec)] == [f.name for f in dataclasses.fields(dc)]


@pytest.mark.parametrize("frozen", [True, False])
def test_equality_and_hash_follow_dataclasses(frozen):
    dc, rec = twins(BODY, frozen)
    for cls in (dc, rec):
        same, other = cls("a", 1, note="n"), cls("a", 2, note="n")
        assert same == cls("a", 1, note="n") and same != other
        assert (same == ("a", 1)) is False  # another class: NotImplemented, then identity
    assert (rec.__hash__ is None) == (dc.__hash__ is None)
    if frozen:
        with pytest.raises(TypeError):  # a list field: unhashable, as the dataclass's
            hash(dc("a"))
        with pytest.raises(TypeError):
            hash(rec("a"))
        body = "    name: str\n    count: int = 0\n"
        dc2, rec2 = twins(body)
        assert hash(rec2("a", 1)) == hash(dc2("a", 1)) == hash(("a", 1))
        assert len({rec2("a", 1), rec2("a", 1), rec2("b", 1)}) == 2


def test_an_instance_of_another_record_class_is_never_equal():
    body = "    name: str\n"
    _, one = twins(body)
    _, two = twins(body)
    assert one("a") != two("a") and one("a") == one("a")


@pytest.mark.parametrize("frozen", [True, False])
def test_frozen_refuses_assignment_and_deletion_as_an_attribute_error(frozen):
    dc, rec = twins(BODY, frozen)
    for cls in (dc, rec):
        thing = cls("a")
        if frozen:
            with pytest.raises(AttributeError, match="cannot assign to field 'count'"):
                thing.count = 2
            with pytest.raises(AttributeError, match="cannot delete field 'count'"):
                del thing.count
            with pytest.raises(AttributeError):
                thing.newattr = 1
        else:
            thing.count = 2
            assert thing.count == 2
    assert issubclass(records.FrozenInstanceError, AttributeError)


def test_post_init_runs_after_every_field_is_set_and_on_replace():
    extra = ("    def __post_init__(self):\n"
             "        object.__setattr__(self, 'labels', MappingProxyType(dict(self.labels)))\n")
    body = BODY + extra
    made = []
    for deco, mod in (("dataclass", dataclasses), ("record", records)):
        ns = {"MappingProxyType": MappingProxyType, "List": List, "Dict": Dict,
              "Optional": Optional, "ClassVar": ClassVar, "mod": mod}
        exec(f"@mod.{deco}(frozen=True)\nclass Thing:\n"  # noqa: S102
             + body.replace("FIELD", "mod.field"), ns)
        made.append(ns["Thing"])
    dc, rec = made
    for cls, replace in ((dc, dataclasses.replace), (rec, records.replace)):
        thing = cls("a", labels={"k": "v"})
        assert isinstance(thing.labels, MappingProxyType) and thing.labels == {"k": "v"}
        copy_ = replace(thing, labels={"x": "y"}, count=5)
        assert isinstance(copy_.labels, MappingProxyType)
        assert (copy_.name, copy_.count, dict(copy_.labels)) == ("a", 5, {"x": "y"})


def test_replace_refuses_an_unknown_field_and_a_non_record():
    dc, rec = twins(BODY)
    assert outcome(lambda: records.replace(rec("a"), bogus=1))[0] == "raises"
    assert outcome(lambda: dataclasses.replace(dc("a"), bogus=1))[0] == "raises"
    with pytest.raises(TypeError):
        records.replace(object())
    with pytest.raises(TypeError):
        records.fields(object())


def test_a_base_records_fields_come_first_and_a_redefined_field_keeps_its_place():
    made = []
    for mod in (dataclasses, records):
        ns = {"mod": mod}
        exec("@mod.dataclass(frozen=True)\nclass Base:\n    a: int\n    b: int = 1\n"  # noqa: S102
             "@mod.dataclass(frozen=True)\nclass Child(Base):\n    c: int = 2\n    a: int = 0\n"
             .replace("mod.dataclass", "mod.dataclass" if mod is dataclasses else "mod.record"),
             ns)
        made.append(ns["Child"])
    dc, rec = made
    assert [f.name for f in records.fields(rec)] == [f.name for f in dataclasses.fields(dc)]
    assert repr(rec()).split("(", 1)[1] == repr(dc()).split("(", 1)[1] == "a=0, b=1, c=2)"
    assert repr(rec(5, 6, 7)).endswith("(a=5, b=6, c=7)")


def test_a_required_field_after_a_default_is_refused_as_dataclasses_refuse_it():
    body = "    count: int = 0\n    name: str\n"
    with pytest.raises(TypeError):
        twins(body)


@pytest.mark.parametrize("default", ["[]", "{}", "set()", "MappingProxyType({})"])
def test_a_mutable_default_is_refused_on_every_python(default):
    ns = {"records": records, "MappingProxyType": MappingProxyType, "List": List}
    with pytest.raises(ValueError, match="mutable default"):
        exec(f"@records.record(frozen=True)\nclass T:\n    x: object = {default}\n", ns)  # noqa: S102


def test_a_body_method_is_kept():
    extra = "    def __repr__(self):\n        return 'mine'\n    def __hash__(self):\n        return 7\n"
    dc, rec = twins("    name: str\n", frozen=False, extra=extra)
    assert repr(rec("a")) == repr(dc("a")) == "mine"
    assert hash(rec("a")) == hash(dc("a")) == 7


def test_records_copy_and_pickle_as_values():
    # Module-level classes pickle by reference: use one of the agent's own.
    from agent.model import Outcome, Status

    outcome_ = Outcome(Status.FAIL, "m", {"gpus_at_fault": ["0"]}, code="x")
    assert pickle.loads(pickle.dumps(outcome_)) == outcome_
    assert copy.deepcopy(outcome_) == outcome_ and copy.copy(outcome_) == outcome_
    assert copy.deepcopy(outcome_).details is not outcome_.details


def test_the_agents_classes_are_records_and_the_default_walk_sees_them():
    import tests.unit.test_dataclass_defaults as walk
    from agent.report import Report

    assert records.is_record(Report) and not dataclasses.is_dataclass(Report)
    names = {f.name for f in records.fields(Report)}
    assert {"path", "strict", "results", "gate"} <= names
    assert walk._problems() == []
