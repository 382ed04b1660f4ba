"""TypedDicts as task values, by value: round trips keep absent keys absent, nested and
recursive TypedDicts, bad values named by their path, refusals at definition time."""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

if sys.version_info >= (3, 11):
    from typing import NotRequired, Required, TypedDict
else:  # Python 3.10: the markers are typing_extensions'
    from typing_extensions import NotRequired, Required, TypedDict

import pytest

import shoal
from shoal._storage import codecs
from shoal.errors import InputError, SpecError, UnsupportedTypeError


def _rt(value: object, tp: object) -> tuple[Any, object]:
    literal = codecs.encode_inputs({"x": value}, {"x": tp}, blobs=None, task="env.fn")["x"]
    back = codecs.decode_inputs({"x": literal}, {"x": tp}, blobs=None, task="env.fn")["x"]
    return literal, back


@dataclasses.dataclass
class Address:
    city: str
    zip: int = 0


class Coord(TypedDict):
    lat: float
    lon: float


class Person(TypedDict):
    name: str
    home: Coord
    address: Address
    tags: list[str]
    nick: str | None
    email: NotRequired[str]


class Loose(TypedDict, total=False):
    a: int
    b: Required[str]


class Node(TypedDict):
    value: str
    children: NotRequired[list[Node]]


PERSON: Person = {"name": "Ann", "home": {"lat": 1.5, "lon": -2.0},
                  "address": Address("SF", 94105), "tags": ["x"], "nick": None}


def test_nested_typeddict_round_trips_with_absent_keys_absent() -> None:
    literal, back = _rt(PERSON, Person)
    assert literal == {"name": "Ann", "home": {"lat": 1.5, "lon": -2.0},
                       "address": {"city": "SF", "zip": 94105}, "tags": ["x"], "nick": None}
    assert back == PERSON and type(back) is dict and "email" not in back  # type: ignore[comparison-overlap]
    assert type(back["address"]) is Address  # type: ignore[index]
    _, with_email = _rt({**PERSON, "email": "a@b"}, Person)
    assert with_email["email"] == "a@b"  # type: ignore[index]


def test_total_false_and_required() -> None:
    assert _rt({"b": "y"}, Loose) == ({"b": "y"}, {"b": "y"})
    assert _rt({"a": 1, "b": "y"}, Loose)[1] == {"a": 1, "b": "y"}
    with pytest.raises(InputError) as err:
        _rt({"a": 1}, Loose)
    assert err.value.field == "input 'x.b' of task 'env.fn'"
    assert "lacks required key 'b'" in err.value.rule


def test_recursive_typeddict() -> None:
    tree = {"value": "r", "children": [{"value": "a"}, {"value": "b", "children": []}]}
    literal, back = _rt(tree, Node)
    assert literal == tree and back == tree and "children" not in back["children"][0]  # type: ignore[index]


def test_bad_values_are_named_by_their_path() -> None:
    with pytest.raises(InputError) as err:
        _rt({**PERSON, "home": {"lat": "north", "lon": 0.0}}, Person)
    assert err.value.field == "input 'x.home.lat' of task 'env.fn'"
    with pytest.raises(InputError) as err:
        _rt({k: v for k, v in PERSON.items() if k != "tags"}, Person)
    assert err.value.field == "input 'x.tags' of task 'env.fn'"
    assert "lacks required key 'tags'" in err.value.rule
    with pytest.raises(InputError) as err:
        _rt({**PERSON, "emial": "a@b"}, Person)
    assert "has no key 'emial'" in err.value.rule and "did you mean 'email'" in err.value.fix
    with pytest.raises(InputError) as err:
        _rt(["Ann"], Person)
    assert "expected Person, got list" in err.value.rule


def test_stored_literal_missing_a_required_key_does_not_decode() -> None:
    with pytest.raises(InputError) as err:
        codecs.decode({"lat": 1.0}, Coord, blobs=None, field="x")
    assert "missing key 'lon'" in err.value.rule


def test_a_field_of_an_unsupported_type_is_refused_when_the_task_is_defined() -> None:
    class Bad(TypedDict):
        ok: int
        fn: Any

    with pytest.raises(UnsupportedTypeError) as err:
        codecs.check_type(Bad, field="parameter 'x'")
    assert "field 'fn' of TypedDict" in err.value.rule
    env = shoal.TaskEnvironment(name="tdenv")
    with pytest.raises(SpecError):
        @env.task
        def take(x: Bad) -> int:
            return 1
