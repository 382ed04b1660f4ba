"""A driver whose second step waits on a file: the test kills the driver there, then resumes."""

from __future__ import annotations

import time
from pathlib import Path

import shoal

steps = shoal.TaskEnvironment(name="steps")
boss = shoal.TaskEnvironment(name="resumer", depends_on=[steps])


@steps.task
def first(marker_dir: str) -> int:
    n = len(list(Path(marker_dir).glob("first-*")))
    Path(marker_dir, f"first-{n}").write_text("ran")
    return 10


@steps.task
def second(x: int, marker_dir: str) -> int:
    Path(marker_dir, "second-started").write_text("1")
    while not Path(marker_dir, "go").exists():
        time.sleep(0.1)
    return x + 1


@boss.task
async def pipeline(marker_dir: str) -> int:
    a = await first.aio(marker_dir)
    return await second.aio(a, marker_dir)
