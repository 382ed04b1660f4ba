"""Gangs for the known traps: torchrun restarts across nodes, killed launchers, priorities."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import shoal
from shoal.clustered import ClusteredTaskEnvironment, ClusterFailurePolicy, TorchRun

RES = shoal.Resources(cpu=1, memory="512Mi")

elastic_env = ClusteredTaskEnvironment(
    name="elastic", resources=RES, replicas=2, nproc_per_node=1,
    runtime=TorchRun(rdzv_backend="c10d", max_restarts=1),
    failure_policy=ClusterFailurePolicy(max_restarts=0, collective_timeout=30, grace_period=2),
)
node_kill_env = ClusteredTaskEnvironment(
    name="nodekill", resources=RES, replicas=2, nproc_per_node=1,
    runtime=TorchRun(rdzv_backend="static"),
    failure_policy=ClusterFailurePolicy(max_restarts=1, collective_timeout=30, grace_period=2),
)
low_env = ClusteredTaskEnvironment(
    name="low", resources=RES, replicas=2, nproc_per_node=1,
    pod_template=shoal.PodTemplate(labels={"kueue.x-k8s.io/priority-class": "batch"}),
    failure_policy=ClusterFailurePolicy(resume_after_preemption=True, grace_period=3),
)
high_env = ClusteredTaskEnvironment(
    name="high", resources=RES, replicas=2, nproc_per_node=1,
    pod_template=shoal.PodTemplate(labels={"kueue.x-k8s.io/priority-class": "urgent"}),
)
boss_env = shoal.TaskEnvironment(name="boss", resources=shoal.Resources(cpu=1),
                                 depends_on=[low_env, high_env])


def _train(steps: int) -> float:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    t = torch.zeros(1)
    for _ in range(steps):
        t += 1
        dist.all_reduce(t)
        t /= dist.get_world_size()
        time.sleep(0.05)
    dist.destroy_process_group()
    return float(t.item())


@elastic_env.task
def torchrun_restart(marker_dir: str) -> int:
    """Rank 1 dies once; torchrun's own restart (c10d, across both nodes) recovers. c10d may
    hand out ranks differently after the re-rendezvous, so "once" is a marker file."""
    Path(marker_dir, f"start-{os.getpid()}").write_text(str(shoal.ctx().rank))
    killed = Path(marker_dir, "killed")
    if shoal.ctx().rank == 1 and not killed.exists():
        killed.write_text("1")
        time.sleep(1)
        os.kill(os.getpid(), signal.SIGKILL)
    _train(5)
    return int(shoal.ctx().world_size or 0)


@node_kill_env.task
def survives_node_kill(marker_dir: str) -> int:
    """Trains for a while; the test SIGKILLs node 1's launcher during the first start."""
    ctx = shoal.ctx()
    Path(marker_dir, f"rank{ctx.rank}-r{ctx.restart_attempt}.pid").write_text(str(os.getpid()))
    _train(60 if ctx.restart_attempt == 0 else 3)
    return int(ctx.restart_attempt or 0)


@low_env.task
def low_job(marker_dir: str) -> int:
    ctx = shoal.ctx()
    Path(marker_dir, f"low-{ctx.rank}-r{ctx.restart_attempt}").write_text("1")
    if ctx.restart_attempt == 0:
        time.sleep(120)  # preempted long before this ends
    return int(ctx.restart_attempt or 0)


@high_env.task
def high_job(marker_dir: str) -> int:
    Path(marker_dir, f"high-{shoal.ctx().rank}").write_text(str(time.time()))
    return 1


@boss_env.task
async def low_then_high(marker_dir: str) -> list[int]:
    low = asyncio.ensure_future(low_job.aio(marker_dir))
    while not all(Path(marker_dir, f"low-{r}-r0").exists() for r in (0, 1)):
        await asyncio.sleep(0.1)
    high = await high_job.aio(marker_dir)
    return [await low, high]
