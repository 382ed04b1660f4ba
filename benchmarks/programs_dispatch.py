"""The workload of the dispatch benchmark: N trivial calls fanned out with asyncio.gather."""

from __future__ import annotations

import asyncio

import shoal

leaf = shoal.TaskEnvironment(name="leaf", resources=shoal.Resources(cpu=1))
driver = shoal.TaskEnvironment(name="driver", resources=shoal.Resources(cpu=1),
                               depends_on=[leaf])


@leaf.task
async def noop(i: int) -> int:
    return i


@driver.task
async def fan_out(n: int) -> int:
    results = await asyncio.gather(*(noop(i) for i in range(n)))
    return sum(results)


@driver.task
async def fresh_one_by_one(n: int) -> int:
    """N calls one after another, each in a fresh worker process (``reusable="off"``)."""
    fresh = noop.override(reusable="off")
    total = 0
    for i in range(n):
        total += await fresh(i)
    return total
