"""A small pipeline for the SIGKILL fault suite: a driver, a fan-out of plain tasks, a 2x1 gang
that saves a sharded checkpoint every step, and a final task.

Every task execution leaves a file ``ran-<what>-<unique>`` in ``marker_dir`` (so a test counts
how often a call really ran) and each gang rank writes ``saving-...`` right before each save,
so a test can kill something while a save is in flight.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from pathlib import Path

import shoal
from shoal.clustered import ClusteredTaskEnvironment, ClusterFailurePolicy

fan = shoal.TaskEnvironment(name="fan", resources=shoal.Resources(cpu=1, memory="200Mi"))
gang = ClusteredTaskEnvironment(
    name="ckpt", resources=shoal.Resources(cpu=1, memory="200Mi"), replicas=2, nproc_per_node=1,
    failure_policy=ClusterFailurePolicy(max_restarts=1, collective_timeout=20, grace_period=1),
)
last = shoal.TaskEnvironment(name="last", resources=shoal.Resources(cpu=1, memory="200Mi"))
boss = shoal.TaskEnvironment(name="boss", depends_on=[fan, gang, last])


def _ran(marker_dir: str, what: str) -> None:
    Path(marker_dir, f"ran-{what}-{uuid.uuid4().hex[:8]}").write_text(str(os.getpid()))


@fan.task
def square(i: int, marker_dir: str) -> int:
    _ran(marker_dir, f"square{i}")
    time.sleep(0.2)
    return i * i


@gang.task
def steps(total: int, n: int, marker_dir: str) -> int:
    """Each step adds ``total`` to a running sum kept in the checkpoint, so the result is
    right only if every step counted once across restarts."""
    ctx = shoal.ctx()
    cp = ctx.checkpoint
    _ran(marker_dir, f"steps-rank{ctx.rank}")
    loaded = cp.load_shard_sync()
    acc = 0 if loaded is None else int(loaded if isinstance(loaded, bytes) else
                                       loaded.read_bytes())
    latest = cp.latest()
    start = 0 if latest is None else latest + 1
    for step in range(start, n):
        acc += total
        Path(marker_dir, f"saving-{uuid.uuid4().hex[:8]}").write_text(str(step))
        cp.save_shard_sync(str(acc).encode(), step=step)
        time.sleep(0.1)
    return acc


@last.task
def finish(acc: int, squares: list[int], marker_dir: str) -> int:
    _ran(marker_dir, "finish")
    return acc + sum(squares)


@boss.task
async def main(marker_dir: str, width: int = 3, n: int = 4) -> int:
    _ran(marker_dir, "main")
    squares = list(await asyncio.gather(*(square.aio(i, marker_dir) for i in range(width))))
    acc = await steps.aio(sum(squares), n, marker_dir)
    return await finish.aio(acc, squares, marker_dir)
