"""A driver that maps thousands of trivial calls and measures the processes around it."""

from __future__ import annotations

import psutil

import shoal

leaf = shoal.TaskEnvironment(name="scale-leaf")
scale_driver = shoal.TaskEnvironment(name="scale-driver", depends_on=[leaf])


@leaf.task
def inc(x: int) -> int:
    return x + 1


def snapshot() -> dict[str, int]:
    """RSS and open fds of this worker, of the engine's process (its parent) and of the
    engine's other children (the leaf workers), and how many of those there are."""
    me = psutil.Process()
    engine = me.parent()
    assert engine is not None
    others = [p for p in engine.children(recursive=True) if p.pid != me.pid]
    return {"driver_rss": me.memory_info().rss, "driver_fds": me.num_fds(),
            "engine_rss": engine.memory_info().rss, "engine_fds": engine.num_fds(),
            "workers": len(others), "workers_fds": sum(p.num_fds() for p in others)}


@scale_driver.task
def map_rounds(n: int, rounds: int, concurrency: int) -> list[dict[str, int]]:
    out = []
    for _ in range(rounds):
        total = sum(shoal.map(inc, range(n), concurrency=concurrency, return_exceptions=False))
        assert total == n * (n + 1) // 2
        out.append(snapshot())
    return out
