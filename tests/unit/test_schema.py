"""agent/safeio/schema.py: declared records, the conversions pydantic 2's lax mode made (its
docs, "Conversion Table": "3" and 3.0 are the int 3, "yes" and 1 are True, a str field takes no
int), unknown keys refused, and every problem's location. Expected values are written by hand
from those rules."""
import datetime
from typing import Annotated, Dict, List, Literal, Optional, Union

import pytest

from agent.safeio.schema import Field, Record, ValidationError, field_validator, model_validator


class Inner(Record, frozen=True):
    count: int = Field(default=1, ge=1)
    kind: str = Field(default="ltsb", pattern="^(ltsb|feature)$")


class Outer(Record):
    name: str
    ratio: float = Field(default=0.5, gt=0.0, le=1.0)
    on: bool = False
    day: Optional[datetime.date] = None
    tags: List[str] = []
    inner: Inner = Inner()
    codes: Dict[int, Inner] = {}
    klass: Literal["warn", "fail"] = Field(default="warn", alias="class")
    least: Union[Literal["all"], Annotated[int, Field(ge=1, strict=True)]] = "all"

    @field_validator("tags")
    @classmethod
    def _no_empty(cls, tags: List[str]) -> List[str]:
        if any(not t for t in tags):
            raise ValueError("an empty tag")
        return tags

    @model_validator(mode="after")
    def _not_both(self) -> "Outer":
        if self.on and self.klass == "fail":
            raise ValueError("on and fail together")
        return self


def _first(data: dict) -> tuple:
    with pytest.raises(ValidationError) as err:
        Outer.model_validate(data)
    e = err.value.errors()[0]
    return e["loc"], e["msg"], err.value.error_count()


def test_lax_conversions_give_the_declared_types():
    got = Outer.model_validate({"name": "n", "ratio": "0.25", "on": "yes", "day": "2026-06-30",
                                "inner": {"count": "3"}, "codes": {"13": {"count": 2.0}},
                                "class": "warn", "least": 7})
    assert (got.ratio, got.on, got.day) == (0.25, True, datetime.date(2026, 6, 30))
    assert got.inner == Inner(count=3) and got.codes == {13: Inner(count=2)}
    assert (got.klass, got.least) == ("warn", 7)
    assert Outer.model_validate({"name": "n", "on": 0, "class": "fail"}).klass == "fail"
    assert got.model_fields_set == {"name", "ratio", "on", "day", "inner", "codes", "klass",
                                    "least"}


@pytest.mark.parametrize("data, loc, msg", [
    ({}, ("name",), "Field required"),
    ({"name": 5}, ("name",), "Input should be a valid string"),
    ({"name": "n", "nmae": 1}, ("nmae",), "Extra inputs are not permitted"),
    ({"name": "n", "ratio": 0}, ("ratio",), "Input should be greater than 0"),
    ({"name": "n", "ratio": 1.5}, ("ratio",), "Input should be less than or equal to 1"),
    ({"name": "n", "on": 2}, ("on",), "Input should be a valid boolean, unable to interpret input"),
    ({"name": "n", "inner": {"count": 2.5}}, ("inner", "count"),
     "Input should be a valid integer, got a number with a fractional part"),
    # `$` is the end of the text, as in the Rust regex pydantic used: no trailing newline.
    ({"name": "n", "inner": {"kind": "ltsb\n"}}, ("inner", "kind"),
     "String should match pattern '^(ltsb|feature)$'"),
    ({"name": "n", "codes": {"x": {}}}, ("codes", "x", "[key]"),
     "Input should be a valid integer, unable to parse string as an integer"),
    ({"name": "n", "tags": ["a", ""]}, ("tags",), "Value error, an empty tag"),
    ({"name": "n", "tags": "ab"}, ("tags",), "Input should be a valid list"),
    ({"name": "n", "klass": "fail", "class": "warn"}, ("klass",), "Extra inputs are not permitted"),
    ({"name": "n", "class": "Fail"}, ("class",), "Input should be 'warn' or 'fail'"),
    ({"name": "n", "on": True, "class": "fail"}, (), "Value error, on and fail together"),
    ({"name": "n", "day": "2026-6-30"}, ("day",), "Input should be a valid date"),
])
def test_refusals_name_the_field(data, loc, msg):
    assert _first(data)[:2] == (loc, msg)


@pytest.mark.parametrize("bad", ["7", 7.0, True, 0, "all "])
def test_a_strict_int_in_a_union_takes_an_int_only(bad):
    loc, msg, _ = _first({"name": "n", "least": bad})
    assert loc == ("least",) and "Input should be 'all'" in msg


def test_every_bad_field_is_counted_in_field_order_then_unknown_keys():
    loc, _msg, count = _first({"ratio": 2, "zz": 1, "on": "maybe"})
    assert (loc, count) == (("name",), 4)


def test_frozen_records_refuse_assignment_and_defaults_are_not_shared():
    a, b = Outer(name="a"), Outer(name="b")
    a.tags.append("x")
    assert b.tags == [] and Outer(name="c").tags == []
    with pytest.raises(ValidationError):
        a.inner.count = 5  # type: ignore[misc]
    a.name = "renamed"  # a record not declared frozen takes assignment (not validated)
    assert a.name == "renamed"


def test_dump_copy_and_equality():
    rec = Outer(name="n", day=datetime.date(2026, 1, 2), codes={13: {"count": 4}})
    assert rec.model_dump()["codes"] == {13: {"count": 4, "kind": "ltsb"}}
    assert rec.model_dump(mode="json")["day"] == "2026-01-02"
    assert rec.model_dump(mode="json")["codes"] == {"13": {"count": 4, "kind": "ltsb"}}
    twin = rec.model_copy(update={"name": "m"})
    assert twin.name == "m" and rec.name == "n" and "name" in twin.model_fields_set
    assert Outer(name="n") == Outer(name="n") != Outer(name="x")
    assert hash(Inner(count=2)) == hash(Inner(count=2))
    assert Outer.model_validate(rec) is rec
