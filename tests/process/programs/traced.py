"""Groups and traces in the call tree: recorded, shown, and replayed on retries and resumes.

Every traced function appends a line to ``<marker_dir>/<name>.runs`` when it really runs, so a
test can count executions across attempts and resumed runs.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import shoal

work = shoal.TaskEnvironment(name="work")
boss = shoal.TaskEnvironment(name="boss", depends_on=[work])


def _ran(marker_dir: str, name: str) -> int:
    path = Path(marker_dir, f"{name}.runs")
    with path.open("a") as f:
        f.write("ran\n")
    return len(path.read_text().splitlines())


@dataclass
class Batch:
    index: int
    rows: list[int]


@shoal.trace
def load_batch(marker_dir: str, index: int) -> Batch:
    _ran(marker_dir, f"load_batch-{index}")
    return Batch(index=index, rows=[index * 10 + k for k in range(3)])


@shoal.trace
async def score(marker_dir, batch):  # no hints: pickled, as in Flyte
    _ran(marker_dir, f"score-{batch.index}")
    return {"sum": sum(batch.rows), "note": object.__name__}


@shoal.trace
def broken(x: int) -> int:
    raise ValueError(f"cannot handle {x}")


@work.task
def square(x: int) -> int:
    return x * x


@boss.task
async def grouped(marker_dir: str) -> int:
    with shoal.group("prep"):
        a = await square.aio(2)
        batch = load_batch(marker_dir, 1)
    with shoal.group("train"):
        with shoal.group("epoch-1"):
            b = await square.aio(3)
        s = await score(marker_dir, batch)
    with contextlib.suppress(ValueError):  # recorded as failed, and the task goes on
        broken(7)
    return a + b + s["sum"]


@work.task(retries=1)
async def flaky(marker_dir: str) -> int:
    batch = load_batch(marker_dir, 2)
    s = await score(marker_dir, batch)
    if shoal.ctx().attempt == 0:
        raise RuntimeError("attempt 0 fails after two traced calls")
    return s["sum"]


@boss.task
async def retried(marker_dir: str) -> int:
    return await flaky.aio(marker_dir)


@work.task
async def interrupted(marker_dir: str) -> int:
    batch = load_batch(marker_dir, 3)
    s = await score(marker_dir, batch)
    Path(marker_dir, "traced-twice").write_text("1")
    while not Path(marker_dir, "go").exists():
        time.sleep(0.1)
    last = load_batch(marker_dir, 4)
    return s["sum"] + sum(last.rows)


@boss.task
async def resumable(marker_dir: str) -> int:
    return await interrupted.aio(marker_dir)


@shoal.trace
def shard_rows(marker_dir: str, shard: int) -> Iterator[Batch]:
    _ran(marker_dir, f"shard_rows-{shard}")
    for k in range(3):
        yield Batch(index=shard, rows=[shard * 100 + k])


@shoal.trace
async def stream(marker_dir: str, n: int) -> AsyncIterator[int]:
    _ran(marker_dir, f"stream-{n}")
    for i in range(n):
        yield i


@shoal.trace
def cut_short(marker_dir: str) -> Iterator[int]:
    _ran(marker_dir, "cut_short")
    yield 1
    raise ValueError("source went away")


@work.task(retries=1)
async def streamed(marker_dir: str) -> int:
    total = sum(b.rows[0] for b in shard_rows(marker_dir, 5))  # completes: replayed on retry
    total += sum([i async for i in stream(marker_dir, 4)])  # completes: replayed on retry
    for i in shard_rows(marker_dir, 6):  # left after one item: runs again on the retry
        total += i.rows[0]
        break
    with contextlib.suppress(ValueError):  # raised: runs again on the retry
        for i in cut_short(marker_dir):
            total += i
    if shoal.ctx().attempt == 0:
        raise RuntimeError("attempt 0 fails after four traced generators")
    return total


@boss.task
async def generated(marker_dir: str) -> int:
    return await streamed.aio(marker_dir)
