"""Tasks that log metrics: a plain task (sync and async), a gang whose every rank logs, and a
task that fails after logging (its points must survive)."""

from __future__ import annotations

import asyncio
import math
import os
import signal
import threading
import time
from pathlib import Path

import shoal
from shoal.clustered import ClusteredTaskEnvironment, ClusterFailurePolicy

env = shoal.TaskEnvironment(name="metered", resources=shoal.Resources(cpu=1, memory="1Gi"))
gang_env = ClusteredTaskEnvironment(
    name="metered_gang", resources=shoal.Resources(cpu=(1, 2), memory=("1Gi", "2Gi")),
    replicas=2, nproc_per_node=2,
    failure_policy=ClusterFailurePolicy(max_restarts=1, collective_timeout=20, grace_period=2),
)


@env.task
def plain(steps: int = 50) -> int:
    for step in range(steps):
        shoal.log_metrics({"loss": 1.0 / (step + 1), "lr": 0.1}, step=step)
    shoal.log_metrics({"loss": math.nan}, step=steps)
    # a thread of the task logs to the same call (a data loader's, say)
    worker = threading.Thread(target=shoal.log_metrics, args=({"from_thread": 1.0},))
    worker.start()
    worker.join()
    return steps


@env.task
async def async_plain(steps: int = 5) -> int:
    for step in range(steps):
        shoal.log_metrics({"tokens_per_s": 100.0 * step}, step=step)
        await asyncio.sleep(0)
    return steps


@env.task
def logs_then_fails(steps: int = 10) -> int:
    for step in range(steps):
        shoal.log_metrics({"loss": float(step)}, step=step)
    raise RuntimeError("broken after logging")


@gang_env.task
def ranks(steps: int = 20, die_at: int = -1, marker: str = "") -> int:
    c = shoal.ctx()
    for step in range(steps):
        if step == die_at and c.rank == 3 and c.restart_attempt == 0:
            shoal.log_metrics({"loss": -1.0}, step=step)
            if marker:
                Path(marker).write_text(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)
        shoal.log_metrics({"loss": (c.rank or 0) + 1.0 / (step + 1)}, step=step)
        time.sleep(0.08)  # the first start outlives a flush (every 0.5 s) before the kill
    return c.world_size or 0


@env.task
def driver(steps: int = 3) -> int:
    shoal.log_metrics({"driver_metric": 1.0})
    return plain(steps)
