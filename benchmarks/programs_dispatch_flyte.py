"""The dispatch benchmark's workload written for Flyte 2, to run under its local mode.

The same pipeline as ``programs_dispatch.py``: two environments, the driver's depending on the
leaf's, and an async driver task that fans N trivial async calls out with ``asyncio.gather``.
It imports ``flyte``, so it runs only in the Flyte venv that ``dispatch.py`` makes
(``benchmarks/.venv-flyte``), never in Shoal's.
"""

from __future__ import annotations

import asyncio

import flyte

leaf = flyte.TaskEnvironment(name="leaf", resources=flyte.Resources(cpu=1))
driver = flyte.TaskEnvironment(name="driver", resources=flyte.Resources(cpu=1),
                               depends_on=[leaf])


@leaf.task
async def noop(i: int) -> int:
    return i


@driver.task
async def fan_out(n: int) -> int:
    results = await asyncio.gather(*(noop(i) for i in range(n)))
    return sum(results)
