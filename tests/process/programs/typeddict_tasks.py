"""Flyte 2-style tasks passing TypedDicts (nested, with NotRequired keys and a dataclass
inside) between real task processes."""

from __future__ import annotations

import dataclasses
from typing import NotRequired, TypedDict

import shoal as flyte


@dataclasses.dataclass
class Address:
    city: str


class Call(TypedDict):
    name: str
    args: dict


class Reply(TypedDict):
    content: str
    address: Address
    calls: NotRequired[list[Call]]


env = flyte.TaskEnvironment(name="tdict")


@env.task
async def make(with_calls: bool) -> Reply:
    reply = Reply(content="hi", address=Address("SF"))
    if with_calls:
        reply["calls"] = [Call(name="search", args={"q": 1})]
    return reply


@env.task
async def read(reply: Reply) -> str:
    calls = [c["name"] for c in reply["calls"]] if "calls" in reply else "absent"
    return f"{reply['content']} {type(reply['address']).__name__}:{reply['address'].city} {calls}"


@env.task
async def pipeline() -> tuple[str, str]:
    return await read(await make(False)), await read(await make(True))
