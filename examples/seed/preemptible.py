"""A run that a higher-priority job may preempt: it is requeued and resumes from its checkpoint,
without using one of its restarts.

    shoal run examples/seed/preemptible.py train --name my-run     # in one terminal
    shoal preempt my-run                                            # in another, while it trains

``shoal preempt`` does by hand what a higher-priority gang does when the machine is full (or
Kueue on a cluster): the ranks get SIGTERM and ``grace_period`` seconds, the gang is stopped
and requeued, and when it is readmitted it starts again with ``ctx().restart_attempt`` one
higher. ``resume_after_preemption=True`` means that start is not counted against
``max_restarts`` -- here 0, so a crash would fail the task, but a preemption does not.

Progress survives because rank 0 saves model and optimizer to ``ctx().checkpoint`` after every
step, and every start loads the latest save: a preemption costs at most one step.
"""

from __future__ import annotations

import io
import time
from dataclasses import dataclass

import shoal as flyte
from shoal.clustered import ClusteredTaskEnvironment, ClusterFailurePolicy, TorchRun

env = ClusteredTaskEnvironment(
    name="preemptible",
    image=flyte.Image.from_debian_base().with_pip_packages("torch"),
    resources=flyte.Resources(cpu=1, memory="1Gi"),
    replicas=2,
    nproc_per_node=1,
    runtime=TorchRun(),
    env_vars={"OMP_NUM_THREADS": "1"},
    failure_policy=ClusterFailurePolicy(resume_after_preemption=True, max_restarts=0,
                                        grace_period=10),
)


@dataclass
class Outcome:
    first_step: int  # where the last start of the gang began (0 unless it resumed)
    restart_attempt: int  # how many times the gang was started again
    loss: float


@env.task
async def train(steps: int = 40, step_seconds: float = 0.25) -> Outcome:
    """Fit y = x · [1, 1, 1, 1] with DDP, one checkpoint per step."""
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    ctx = flyte.ctx()
    cp = ctx.checkpoint
    dist.init_process_group("gloo")
    rank = dist.get_rank()

    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)

    # Every rank reads the latest save (the store is shared), so all start from the same step.
    latest = cp.latest()
    first_step = 0 if latest is None else latest + 1
    if latest is not None:
        state = torch.load(io.BytesIO(await cp.load(step=latest)), weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    print(f"[rank {rank}] start {ctx.restart_attempt}: "
          + (f"resuming after step {latest}" if latest is not None else "from scratch"),
          flush=True)
    ddp = DDP(model)

    loss_value = float("nan")
    for step in range(first_step, steps):
        g = torch.Generator().manual_seed(1000 * step + rank)
        x = torch.randn(64, 4, generator=g)
        loss = nn.functional.mse_loss(ddp(x), x.sum(dim=1, keepdim=True))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        loss_value = float(loss.detach())
        time.sleep(step_seconds)  # stands in for a step of real work

        if rank == 0:
            buf = io.BytesIO()
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, buf)
            await cp.save(buf.getvalue(), step=step)
            print(f"[rank 0] step {step:3d} loss {loss_value:.4f}, checkpointed", flush=True)
        dist.barrier()  # the next step begins once this one is saved

    dist.destroy_process_group()
    return Outcome(first_step=first_step, restart_attempt=ctx.restart_attempt or 0,
                   loss=loss_value)
