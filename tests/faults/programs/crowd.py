"""A fan-out for the concurrent-runs fault suite: each leaf writes a small object to the store
and returns it as a `shoal.File`; a second fan-out reads them back. Many of these run at once
on one SHOAL_HOME, one store and one machine pool."""

from __future__ import annotations

import asyncio

import shoal

leaf = shoal.TaskEnvironment(name="crowd-leaf", resources=shoal.Resources(cpu=1, memory="100Mi"))
crowd = shoal.TaskEnvironment(name="crowd", depends_on=[leaf])


@leaf.task
def piece(tag: str, i: int) -> shoal.File:
    f = shoal.File.new_remote(f"{tag}-{i}.txt")
    with f.open_sync("wb") as out:
        out.write(f"{tag}:{i * i}".encode())
    return f


@leaf.task
def value(f: shoal.File, tag: str) -> int:
    with f.open_sync("rb") as src:
        owner, number = src.read().decode().split(":")
    if owner != tag:
        raise ValueError(f"{f.path} belongs to run {owner}, not {tag}")
    return int(number)


@crowd.task
async def main(tag: str, width: int = 6) -> int:
    files = await asyncio.gather(*(piece.aio(tag, i) for i in range(width)))
    return sum(await asyncio.gather(*(value.aio(f, tag) for f in files)))
