"""NamedTuples, Literals of Enum members, and plain dicts passed for models and dataclasses,
by value: round trips, bad values, and refusals when a task is defined."""

from __future__ import annotations

import collections
import dataclasses
import enum
import pathlib
import typing
from typing import Any, Literal, NamedTuple

import pytest
from pydantic import BaseModel, Field, field_validator

import shoal
from shoal._storage import codecs
from shoal.cli.args import convert
from shoal.errors import InputError, SpecError, UnsupportedTypeError

TASK = "input 'x' of task 'env.fn'"


def _rt(value: object, tp: object) -> tuple[Any, object]:
    literal = codecs.encode_inputs({"x": value}, {"x": tp}, blobs=None, task="env.fn")["x"]
    back = codecs.decode_inputs({"x": literal}, {"x": tp}, blobs=None, task="env.fn")["x"]
    return literal, back


def _encode(value: object, tp: object) -> Any:
    return codecs.encode_inputs({"x": value}, {"x": tp}, blobs=None, task="env.fn")["x"]


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Point(NamedTuple):
    lat: float
    lon: float
    alt: float = 0.0


@dataclasses.dataclass
class Address:
    city: str
    zip: int = 0


class Person(NamedTuple):
    name: str
    home: Address
    visits: list[Point]
    where: Point | None = None


# -- NamedTuple -----------------------------------------------------------------------------

def test_namedtuple_round_trips_by_field_name() -> None:
    literal, back = _rt(Point(1.5, -2.0), Point)
    assert literal == {"lat": 1.5, "lon": -2.0, "alt": 0.0}
    assert type(back) is Point and back == Point(1.5, -2.0, 0.0)
    assert back.lat == 1.5
    lat, lon, alt = back  # still a tuple to the code that unpacks it
    assert (lat, lon, alt) == (1.5, -2.0, 0.0)


def test_nested_namedtuple_dataclass_and_list_fields_use_their_own_hints() -> None:
    person = Person("Bob", Address("SF", 94105), [Point(1, 2), Point(3, 4, 5)], Point(0, 0))
    literal, back = _rt(person, Person)
    assert literal == {"name": "Bob", "home": {"city": "SF", "zip": 94105},
                       "visits": [{"lat": 1, "lon": 2, "alt": 0.0},
                                  {"lat": 3, "lon": 4, "alt": 5}],
                       "where": {"lat": 0, "lon": 0, "alt": 0.0}}
    assert back == person
    assert type(back.home) is Address and type(back.visits[1]) is Point


def test_a_plain_tuple_of_the_right_length_is_taken_by_position() -> None:
    # A task declared `-> Point` that ends with `return lat, lon, alt`.
    assert _rt((1.0, 2.0, 3.0), Point)[1] == Point(1.0, 2.0, 3.0)


@pytest.mark.parametrize(
    ("value", "field", "in_rule"),
    [
        ((1.0, 2.0), TASK, "expected Point: 3 fields (lat, lon, alt), got 2 items"),
        (Point("north", 2.0),  # type: ignore[arg-type]
         "input 'x.lat' of task 'env.fn'", "expected float, got str"),
        ({"lat": 1.0, "lon": 2.0}, TASK, "expected Point, got dict"),
        (Address("SF"), TASK, "expected Point, got"),
    ],
)
def test_bad_namedtuple_values_name_the_field(value: object, field: str, in_rule: str) -> None:
    with pytest.raises(InputError) as err:
        _encode(value, Point)
    assert err.value.field == field
    assert in_rule in err.value.rule


def test_a_stored_namedtuple_missing_a_defaulted_field_takes_the_default() -> None:
    back = codecs.decode({"lat": 1.0, "lon": 2.0}, Point, blobs=None, field="x")
    assert back == Point(1.0, 2.0, 0.0)
    with pytest.raises(InputError, match="missing field 'lon'"):
        codecs.decode({"lat": 1.0}, Point, blobs=None, field="x")
    with pytest.raises(InputError, match="did you mean 'alt'"):
        codecs.decode({"lat": 1.0, "lon": 2.0, "alt_": 3}, Point, blobs=None, field="x")


class WithPath(NamedTuple):
    name: str
    p: pathlib.Path


def test_namedtuple_fields_are_checked_when_the_task_is_defined() -> None:
    with pytest.raises(UnsupportedTypeError) as err:
        codecs.check_type(WithPath, field="return type of task 'env.fn'")
    assert "(field 'p' of NamedTuple WithPath) is a path" in err.value.rule
    untyped = collections.namedtuple("untyped", ["a", "b"])
    with pytest.raises(UnsupportedTypeError, match="no type hint for field 'a'"):
        codecs.check_type(untyped, field="x")


def test_a_task_returning_a_namedtuple_is_defined_and_its_bad_field_refused() -> None:
    env = shoal.TaskEnvironment(name="nt_defs")

    @env.task
    async def good() -> Person:
        return Person("a", Address("b"), [])

    assert good.name == "nt_defs.good"
    with pytest.raises(UnsupportedTypeError, match="field 'p' of NamedTuple WithPath"):
        @env.task
        async def bad(x: WithPath) -> str:
            return x.name


# -- Literal --------------------------------------------------------------------------------

Mixed = Literal[Color.RED, "medium", 3, True]


@pytest.mark.parametrize(
    ("value", "stored"),
    [(Color.RED, {"enum": "Color", "name": "RED"}), ("medium", "medium"), (3, 3), (True, True)],
)
def test_literal_values_of_every_kind_round_trip(value: object, stored: object) -> None:
    literal, back = _rt(value, Mixed)
    assert literal == stored
    assert back == value and type(back) is type(value)


def test_an_enum_member_and_its_name_as_text_stay_apart() -> None:
    tp = Literal["RED", Color.RED]
    assert _rt("RED", tp) == ("RED", "RED")
    assert _rt(Color.RED, tp)[1] is Color.RED


@pytest.mark.parametrize("value", [Color.GREEN, "red", "RED", 4, 1, False, None])
def test_a_value_outside_the_literal_names_the_field_and_the_allowed_values(value: object) -> None:
    with pytest.raises(InputError) as err:
        _encode(value, Mixed)
    assert err.value.field == TASK
    assert err.value.rule == "expected one of Color.RED, 'medium', 3, True"


def test_a_literal_in_a_dataclass_is_checked_by_field() -> None:
    @dataclasses.dataclass
    class Shade:
        level: Literal["low", "high"]

    assert _rt(Shade("low"), Shade)[1] == Shade("low")
    with pytest.raises(InputError) as err:
        _encode(Shade("mid"), Shade)  # type: ignore[arg-type]
    assert err.value.field == "input 'x.level' of task 'env.fn'"
    assert "'low', 'high'" in err.value.rule


def test_a_stored_literal_outside_the_values_does_not_decode() -> None:
    for stored in ("low", {"enum": "Color", "name": "GREEN"}, 1):
        with pytest.raises(InputError, match="does not decode"):
            codecs.decode(stored, Mixed, blobs=None, field="x")


def test_other_literal_values_are_refused_when_the_task_is_defined() -> None:
    with pytest.raises(UnsupportedTypeError, match="Enum members"):
        codecs.check_type(Literal[1.5], field="x")


@pytest.mark.parametrize(
    ("text", "tp", "expected"),
    [("low", Literal["low", "high"], "low"), ("2", Literal[1, 2], 2),
     ("RED", Mixed, Color.RED), ("red", Mixed, Color.RED), ("medium", Mixed, "medium"),
     ("3", Mixed, 3), ("true", Mixed, True), ("high", Literal["low", "high"] | None, "high")],
)
def test_the_cli_takes_literal_values_as_choices(text: str, tp: object, expected: object) -> None:
    value = convert(text, tp, "--level")
    assert value == expected and type(value) is type(expected)


def test_the_cli_refuses_a_value_outside_the_literal_listing_the_choices() -> None:
    with pytest.raises(SpecError) as err:
        convert("hgh", Literal["low", "high"], "--level")
    assert "is not one of the allowed values (low, high)" in str(err.value)
    assert "did you mean --level high?" in str(err.value)


# -- a dict where a model or a dataclass is expected ----------------------------------------

class Summary(BaseModel):
    total: int = 0
    notes: list[str] = Field(default_factory=list)


class Query(BaseModel):
    query: str
    name: str = "default"
    tags: dict[str, str] | None = None
    summary: Summary = Field(default_factory=Summary)

    @field_validator("query")
    @classmethod
    def _not_empty(cls, v: str) -> str:
        if not v:
            raise ValueError("query must not be empty")
        return v


@dataclasses.dataclass
class QueryDC:
    query: str
    home: Address
    name: str = "default"
    tags: dict[str, str] | None = None


def test_a_dict_is_validated_into_the_model_with_its_defaults() -> None:
    literal, back = _rt({"query": "select 1", "summary": {"total": 2}}, Query)
    assert type(back) is Query
    assert back == Query(query="select 1", summary=Summary(total=2))
    # Stored as the model itself would be: same literal, same cache key.
    assert literal == _encode(Query(query="select 1", summary=Summary(total=2)), Query)


@pytest.mark.parametrize(
    ("value", "field", "in_rule"),
    [({"name": "x"}, "input 'x.query' of task 'env.fn'", "Field required"),
     ({"query": ""}, "input 'x.query' of task 'env.fn'", "query must not be empty"),
     ({"query": "q", "summary": {"total": "many"}}, "input 'x.summary.total' of task 'env.fn'",
      "valid integer")],
)
def test_a_bad_dict_for_a_model_fails_with_the_models_error(value: object, field: str,
                                                            in_rule: str) -> None:
    with pytest.raises(InputError) as err:
        _encode(value, Query)
    assert err.value.field == field
    assert "Query rejected the dict" in err.value.rule and in_rule in err.value.rule


def test_a_dict_is_built_into_the_dataclass_nested_dicts_too() -> None:
    literal, back = _rt({"query": "q", "home": {"city": "SF"}}, QueryDC)
    assert back == QueryDC(query="q", home=Address("SF"))
    assert type(back) is QueryDC and type(back.home) is Address
    assert literal == _encode(QueryDC("q", Address("SF")), QueryDC)


@pytest.mark.parametrize(
    ("value", "field", "in_rule"),
    [({"query": "q"}, "input 'x.home' of task 'env.fn'", "lacks required field 'home'"),
     ({"query": "q", "home": {"city": "SF"}, "nmae": "a"}, "input 'x.nmae' of task 'env.fn'",
      "QueryDC has no field 'nmae'"),
     ({"query": "q", "home": {"city": 3}}, "input 'x.home.city' of task 'env.fn'",
      "expected str, got int")],
)
def test_a_bad_dict_for_a_dataclass_names_the_field(value: object, field: str,
                                                    in_rule: str) -> None:
    with pytest.raises(InputError) as err:
        _encode(value, QueryDC)
    assert err.value.field == field
    assert in_rule in err.value.rule


def test_a_dict_with_a_misspelt_field_suggests_the_name() -> None:
    with pytest.raises(InputError) as err:
        _encode({"query": "q", "home": {"city": "SF"}, "nmae": "a"}, QueryDC)
    assert err.value.fix is not None and "did you mean 'name'?" in err.value.fix


# -- an untyped dict, as Flyte's: JSON values -----------------------------------------------

@pytest.mark.parametrize("tp", [dict, dict[str, Any], typing.Dict])  # noqa: UP006
def test_an_untyped_dict_round_trips_json_values(tp: object) -> None:
    value = {"a": 1, "b": [1.5, "x", None, True], "c": {"d": (1, 2)}}
    literal, back = _rt(value, tp)
    assert literal == back == {"a": 1, "b": [1.5, "x", None, True], "c": {"d": [1, 2]}}


@pytest.mark.parametrize(
    ("value", "field", "in_rule"),
    [({"a": {1, 2}}, "input 'x[\"a\"]' of task 'env.fn'", "got set"),
     ({"a": [Color.RED]}, "input 'x[\"a\"][0]' of task 'env.fn'", "dict.Color"),
     ({1: "a"}, "input 'x[1]' of task 'env.fn'", "text keys, got int"),
     ({"a": float("nan")}, "input 'x[\"a\"]' of task 'env.fn'", "not JSON"),
     ([("a", 1)], TASK, "expected dict, got list")],
)
def test_an_untyped_dict_with_other_values_names_the_path(value: object, field: str,
                                                          in_rule: str) -> None:
    with pytest.raises(InputError) as err:
        _encode(value, dict)
    assert err.value.field == field
    assert in_rule in err.value.rule


def test_an_untyped_dict_is_pickled_when_the_task_allows_pickle() -> None:
    literal = codecs.encode({"a": {1, 2}}, dict, blobs=None, field="x", allow_pickle=True)
    assert set(literal) == {"pickle"}
    assert codecs.decode(literal, dict, blobs=None, field="x", allow_pickle=True) == {"a": {1, 2}}
