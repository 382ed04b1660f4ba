"""Gangs for the Slurm engine's tests: each environment has the failure policy its test needs.
Small on purpose: every node of the test cluster has 4 CPUs and 4000 MB."""

from __future__ import annotations

import io
import os
import signal
import socket
import time

import shoal
from shoal.clustered import ClusteredTaskEnvironment, ClusterFailurePolicy, TorchRun

small = shoal.Resources(cpu=1, memory="600Mi")

restarting = ClusteredTaskEnvironment(
    name="restarting", resources=small, replicas=2, nproc_per_node=2, runtime=TorchRun(),
    env_vars={"OMP_NUM_THREADS": "1"},
    failure_policy=ClusterFailurePolicy(max_restarts=1, grace_period=2))

fragile = ClusteredTaskEnvironment(
    name="fragile", resources=small, replicas=2, nproc_per_node=1, runtime=TorchRun(),
    failure_policy=ClusterFailurePolicy(max_restarts=0, grace_period=2))

durable = ClusteredTaskEnvironment(
    name="durable", resources=small, replicas=2, nproc_per_node=1, runtime=TorchRun(),
    env_vars={"OMP_NUM_THREADS": "1"},
    failure_policy=ClusterFailurePolicy(max_restarts=0, resume_after_preemption=True,
                                        grace_period=2))

elastic = ClusteredTaskEnvironment(
    name="elastic", resources=small, replicas=2, min_replicas=1, nproc_per_node=1,
    runtime=TorchRun(), env_vars={"OMP_NUM_THREADS": "1"},
    failure_policy=ClusterFailurePolicy(max_restarts=1, grace_period=2))


def _group() -> tuple[int, int]:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    return dist.get_rank(), dist.get_world_size()


@restarting.task
def crash_once(victim: int = 1) -> dict[str, str]:
    """Rank ``victim`` is SIGKILLed on the first start; the restart finishes."""
    import torch
    import torch.distributed as dist

    c = shoal.ctx()
    rank, world = _group()
    if c.restart_attempt == 0 and rank == victim:
        os.kill(os.getpid(), signal.SIGKILL)
    t = torch.ones(1) * rank
    dist.all_reduce(t)
    return {"restart": str(c.restart_attempt), "world": str(world), "sum": str(t.item()),
            "job": os.environ.get("SLURM_JOB_ID", ""), "step": os.environ.get("SLURM_STEP_ID", ""),
            "node": os.environ.get("SLURMD_NODENAME", ""), "host": socket.gethostname()}


@fragile.task
def always_fails(how: str = "raise") -> int:
    """Rank 1 fails on every start: it raises, or is killed by a signal."""
    import torch.distributed as dist

    rank, _ = _group()
    if rank == 1:
        if how == "raise":
            raise ValueError("rank 1 gives up")
        os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()
    time.sleep(30)
    return rank


@elastic.task
def elastic_steps(count: int = 20, step_seconds: float = 0.5) -> dict[str, int]:
    """`steps` in an elastic gang of 1 to 2 nodes: a lost node's gang goes on with one."""
    result = _steps(count, step_seconds)
    return {**result, "world": shoal.ctx().world_size or 0}


@durable.task
def steps(count: int = 20, step_seconds: float = 0.5) -> dict[str, int]:
    """One checkpoint per step; a requeued gang resumes after the last one."""
    return _steps(count, step_seconds)


def _steps(count: int, step_seconds: float) -> dict[str, int]:
    import torch
    import torch.distributed as dist

    c = shoal.ctx()
    rank, _ = _group()
    cp = c.checkpoint
    latest = cp.latest()
    first = 0 if latest is None else latest + 1
    total = torch.zeros(1)
    if latest is not None:
        total = torch.load(io.BytesIO(cp.load_sync(step=latest)), weights_only=True)
    print(f"[rank {rank}] start {c.restart_attempt} at step {first}", flush=True)
    for step in range(first, count):
        t = torch.ones(1)
        dist.all_reduce(t)
        total += t
        if rank == 0:
            buf = io.BytesIO()
            torch.save(total, buf)
            cp.save_sync(buf.getvalue(), step=step)
        dist.barrier()
        print(f"[rank {rank}] step {step}", flush=True)
        time.sleep(step_seconds)
    return {"first_step": first, "restart": c.restart_attempt, "total": int(total.item())}
