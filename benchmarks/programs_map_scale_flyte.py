"""The map-scale benchmark's workload written for Flyte 2, to run under its local mode.

The same pipeline as ``programs_map_scale.py``'s ``by_map``: a driver task whose environment
depends on the leaf's maps N trivial calls with ``flyte.map`` and a bound on concurrency. It
imports ``flyte``, so it runs only in the Flyte venv (``benchmarks/.venv-flyte``).
"""

from __future__ import annotations

import flyte

leaf = flyte.TaskEnvironment(name="leaf", resources=flyte.Resources(cpu=1))
driver = flyte.TaskEnvironment(name="driver", resources=flyte.Resources(cpu=1),
                               depends_on=[leaf])


@leaf.task
async def inc(i: int) -> int:
    return i + 1


@driver.task
def by_map(n: int, concurrency: int) -> int:
    return sum(flyte.map(inc, range(n), concurrency=concurrency, return_exceptions=False))
