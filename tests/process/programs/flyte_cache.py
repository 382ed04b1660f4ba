"""Flyte 2's cache settings: `behavior="override"` with `version_override`, `serialize=True`."""

from __future__ import annotations

import asyncio
import os
import time

import shoal

env = shoal.TaskEnvironment(name="fcache")


def _mark(folder: str) -> None:
    with open(os.path.join(folder, f"ran-{os.getpid()}-{time.monotonic_ns()}"), "w"):
        pass


@env.task(cache=shoal.Cache(behavior="override", version_override="v1"))
async def versioned(folder: str, x: int) -> int:
    _mark(folder)
    return x + 1


@env.task(cache=shoal.Cache(behavior="auto", serialize=True))
async def slow_square(folder: str, x: int) -> int:
    _mark(folder)
    await asyncio.sleep(0.5)
    return x * x


@env.task(cache=shoal.Cache(behavior="auto"))
async def racing_square(folder: str, x: int) -> int:
    _mark(folder)
    await asyncio.sleep(0.5)
    return x * x


driver = shoal.TaskEnvironment(name="fcache_driver", depends_on=[env])


@driver.task
async def fan(folder: str, serialized: bool) -> list[int]:
    task = slow_square if serialized else racing_square
    return list(await asyncio.gather(*(task(folder, 3) for _ in range(4))))
