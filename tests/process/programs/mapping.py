"""Tasks for the real-process tests of `shoal.map` and `task.override`."""

from __future__ import annotations

import functools
import os
import time

import shoal
from shoal.errors import TaskFailed, TaskTimeout

# A tenth of a core per call: the pool admits many at once, so map's own bound is what shows.
items = shoal.TaskEnvironment(name="items", resources=shoal.Resources(cpu=0.1),
                              env_vars={"MODE": "base"})
mapper = shoal.TaskEnvironment(name="mapper", depends_on=[items])


@items.task
def square(x: int) -> int:
    return x * x


@items.task
async def asquare(x: int) -> int:
    return x * x


@items.task
def add(x: int, y: int) -> int:
    return x + y


@items.task
def timed(x: int, folder: str, seconds: float) -> int:
    """Sleeps, and leaves its start and end times in ``folder`` (to count overlaps)."""
    start = time.time()
    time.sleep(seconds)
    with open(os.path.join(folder, f"{x}.span"), "w") as f:
        f.write(f"{start} {time.time()}")
    return x


@items.task
def fails_on(x: int, bad: int, folder: str) -> int:
    open(os.path.join(folder, f"{x}.started"), "w").close()
    if x == bad:
        raise ValueError(f"item {x} is bad")
    return x


@items.task
def read_env() -> str:
    return f"{os.environ.get('MODE', '')} {os.getpid()}"


@items.task
def flaky(folder: str) -> int:
    """Fails on its first two attempts (counted by files)."""
    n = len(os.listdir(folder))
    open(os.path.join(folder, f"attempt-{n}"), "w").close()
    if n < 2:
        raise RuntimeError(f"flaky failure {n}")
    return n


@items.task
def slow(seconds: float) -> str:
    time.sleep(seconds)
    return "finished"


@items.task
def counted(x: int, folder: str) -> int:
    open(os.path.join(folder, f"run-{len(os.listdir(folder))}"), "w").close()
    return x * 10


def max_overlap(folder: str) -> int:
    edges = []
    for name in os.listdir(folder):
        with open(os.path.join(folder, name)) as f:
            start, end = (float(t) for t in f.read().split())
        edges += [(start, 1), (end, -1)]
    running = peak = 0
    for _, step in sorted(edges):
        running += step
        peak = max(peak, running)
    return peak


@mapper.task
def map_squares(n: int, concurrency: int) -> list[int]:
    return list(shoal.map(square, range(n), concurrency=concurrency))


@mapper.task
def map_two_inputs(n: int) -> list[int]:
    return list(shoal.map(add, range(n), range(100, 100 + n), concurrency=3))


@mapper.task
def map_partial(n: int) -> list[int]:
    return list(shoal.map(functools.partial(add, y=1000), range(n), group_name="plus"))


@mapper.task
def map_timed(n: int, folder: str, concurrency: int, cpus: float) -> int:
    """The most calls that ran at once; ``cpus`` > 0 overrides each call's CPU request."""
    task = timed.override(resources=shoal.Resources(cpu=cpus)) if cpus else timed
    done = list(shoal.map(task, range(n), [folder] * n, [0.4] * n, concurrency=concurrency))
    assert done == list(range(n))
    return max_overlap(folder)


@mapper.task
def map_failures(n: int, bad: int, folder: str, return_exceptions: bool) -> list[str]:
    out: list[str] = []
    try:
        for r in shoal.map(fails_on, range(n), [bad] * n, [folder] * n, concurrency=1,
                           return_exceptions=return_exceptions):
            out.append(f"error: {r.info.message}" if isinstance(r, TaskFailed) else str(r))
    except TaskFailed as e:
        out.append(f"raised: {e.info.message}")
    return out


@mapper.task
async def map_aio(n: int) -> list[int]:
    return [r async for r in shoal.map.aio(asquare, range(n), concurrency=4)]


@mapper.task
async def map_aio_failures(n: int, bad: int, folder: str) -> list[str]:
    out: list[str] = []
    async for r in shoal.map.aio(fails_on, range(n), [bad] * n, [folder] * n):
        out.append(type(r).__name__ if isinstance(r, Exception) else str(r))
    return out


@mapper.task
def env_vars_override() -> list[str]:
    over = read_env.override(env_vars={"MODE": "over"})
    return [read_env(), over(), read_env(), over()]


@mapper.task
def retries_override(folder: str) -> int:
    return flaky.override(retries=2)(folder)


@mapper.task
def timeout_override() -> str:
    try:
        return slow.override(timeout=0.5)(30.0)
    except TaskTimeout as e:
        return f"timed out: {e.info.message}"


@mapper.task
def cache_override(folder: str) -> list[int]:
    cached = counted.override(cache="auto")
    return [cached(4, folder), cached(4, folder), counted(4, folder)]


@mapper.task
def many_env_overrides(k: int) -> list[int]:
    """Calls with k different env_vars, one after another: [workers used, those still alive]."""
    import psutil

    pids = {int(read_env.override(env_vars={"MODE": f"m{i}"})().split()[1]) for i in range(k)}
    engine = psutil.Process().parent()
    assert engine is not None
    deadline = time.monotonic() + 10
    while True:  # the ones told to shut down exit on their own, soon
        alive = [p for p in engine.children() if p.pid in pids and p.status() != "zombie"]
        if len(alive) <= 4 or time.monotonic() > deadline:
            return [len(pids), len(alive)]
        time.sleep(0.05)
