"""A 2-node × 2-rank gang that logs metrics every step; rank 1 kills itself once (SIGKILL) on
the first start, so the gang restarts. Rank 0 checkpoints every 10th step and every start
resumes after the latest. No torch: the ranks only log, print, save and sleep."""

from __future__ import annotations

import math
import os
import signal
import time

import shoal
from shoal.clustered import ClusteredTaskEnvironment, ClusterFailurePolicy

gang_env = ClusteredTaskEnvironment(
    name="uigang", resources=shoal.Resources(cpu=(1, 2), memory=("1Gi", "2Gi")),
    replicas=2, nproc_per_node=2,
    failure_policy=ClusterFailurePolicy(max_restarts=1, collective_timeout=20, grace_period=2),
)


@gang_env.task
def train(steps: int = 30, die_at: int = 4) -> float:
    ctx = shoal.ctx()
    cp = ctx.checkpoint
    latest = cp.latest()
    loss = 0.0
    for step in range(0 if latest is None else latest + 1, steps):
        if step == die_at and ctx.rank == 1 and ctx.restart_attempt == 0:
            print("rank 1 kills itself on purpose", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        loss = math.exp(-step / 10) + 0.01 * ctx.rank
        shoal.log_metrics({"loss": loss, "lr": 0.1 / (step + 1)}, step=step)
        print(f"rank {ctx.rank} step {step} loss {loss:.4f}", flush=True)
        if ctx.rank == 0 and step % 10 == 0:
            cp.save_sync(b"weights" * 100, step=step)
        time.sleep(0.05)
    return loss
