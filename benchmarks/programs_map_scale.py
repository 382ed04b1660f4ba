"""The workload of the map-scale benchmark: N trivial calls of one leaf task from a driver
task, by ``shoal.map`` (sync, bounded concurrency) or by ``asyncio.gather`` (all at once)."""

from __future__ import annotations

import asyncio

import shoal

leaf = shoal.TaskEnvironment(name="leaf", resources=shoal.Resources(cpu=1))
driver = shoal.TaskEnvironment(name="driver", resources=shoal.Resources(cpu=1),
                               depends_on=[leaf])


@leaf.task
async def inc(i: int) -> int:
    return i + 1


@driver.task
def by_map(n: int, concurrency: int) -> int:
    return sum(shoal.map(inc, range(n), concurrency=concurrency, return_exceptions=False))


@driver.task
async def by_gather(n: int) -> int:
    return sum(await asyncio.gather(*(inc(i) for i in range(n))))
