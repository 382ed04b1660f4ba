"""The workload of the containers benchmark: one trivial call, and N of them fanned out with
asyncio.gather from a driver task; every environment has an image (used with --containers)."""

from __future__ import annotations

import asyncio

import shoal

IMAGE = shoal.Image.from_debian_base(name="shoal-bench-containers")
leaf = shoal.TaskEnvironment(name="leaf", image=IMAGE, resources=shoal.Resources(cpu=1))
driver = shoal.TaskEnvironment(name="driver", image=IMAGE, resources=shoal.Resources(cpu=1),
                               depends_on=[leaf])


@leaf.task
async def noop(i: int) -> int:
    return i


@driver.task
async def fan_out(n: int) -> int:
    results = await asyncio.gather(*(noop(i) for i in range(n)))
    return sum(results)
