"""Flyte 2-style tasks for the real-process test of NamedTuples (nested, with a dataclass and a
shoal.io.File inside), Literals of str, int and Enum members, and plain dicts passed where a
pydantic model or a dataclass is declared."""

from __future__ import annotations

import dataclasses
import enum
import tempfile
from pathlib import Path
from typing import Literal, NamedTuple

from pydantic import BaseModel

import shoal as flyte
from shoal.io import File


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


Intensity = Literal["low", "medium", "high"]
Mixed = Literal[Color.RED, "medium", 3]


class Point(NamedTuple):
    lat: float
    lon: float
    alt: float = 0.0


@dataclasses.dataclass
class Address:
    city: str
    zip: int = 0


class Trip(NamedTuple):
    start: Point
    stops: list[Point]
    home: Address
    notes: File


class Query(BaseModel):
    query: str
    name: str = "default"
    tags: dict[str, str] | None = None


@dataclasses.dataclass
class QueryDC:
    query: str
    home: Address
    name: str = "default"


class Outputs(NamedTuple):
    trip: Trip
    described: str
    asked: str


env = flyte.TaskEnvironment(name="ntlit")


@env.task
async def make_point(lat: float, lon: float) -> Point:
    return lat, lon, 7.0  # type: ignore[return-value]  # a plain tuple, taken by position


@env.task
async def make_trip() -> Trip:
    start = await make_point(1.0, 2.0)
    assert type(start) is Point, type(start)
    path = Path(tempfile.mkdtemp()) / "notes.txt"
    path.write_text("bring water")
    return Trip(start=start, stops=[Point(3.0, 4.0), Point(5.0, 6.0, 1.0)],
                home=Address("SF", 94105), notes=await File.from_local(path))


@env.task
async def describe(trip: Trip, level: Intensity, mixed: Mixed) -> str:
    assert type(trip.home) is Address and type(trip.stops[1]) is Point
    with trip.notes.open_sync("rb") as fh:
        notes = fh.read().decode()
    return (f"{trip.start.lat},{trip.start.lon},{trip.start.alt} -> {len(trip.stops)} stops, "
            f"home {trip.home.city}, notes {notes!r}, level {level}, mixed {mixed!r}")


@env.task
async def ask(query: Query, dc: QueryDC) -> str:
    assert type(query) is Query and type(dc) is QueryDC and type(dc.home) is Address
    return f"{query.query}/{query.name}/{query.tags} {dc.query}/{dc.name}/{dc.home.city}"


@env.task
async def pipeline() -> Outputs:
    trip = await make_trip()
    described = await describe(trip, "high", Color.RED)
    asked = await ask({"query": "q1", "tags": {"k": "v"}}, {"query": "q2", "home": {"city": "LA"}})
    return Outputs(trip=trip, described=described, asked=asked)


@env.task
async def level_only(level: Intensity, mixed: Mixed) -> str:
    return f"{level} {mixed!r}"
