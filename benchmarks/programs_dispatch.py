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
