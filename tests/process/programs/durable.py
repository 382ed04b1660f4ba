"""Deterministic training with sharded, asynchronous checkpoints (DDP or FSDP2 on gloo/CPU).

Data for (step, rank) comes from a generator seeded by both, so a run that restarts from a
checkpoint redoes exactly the steps an uninterrupted run did: final parameters must match
bit for bit.

Data parallelism here averages gradients with one all-reduce per parameter rather than DDP's
buckets: DDP rebuilds its buckets in the first iteration of every process, which moves
gradients to other offsets of the reduced buffer, and gloo's ring sums each chunk of the
buffer in another order; one step after a restart then rounds differently (last bit). FSDP2
reduce-scatters per parameter and needs nothing of the kind.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import shoal
from shoal.clustered import ClusteredTaskEnvironment, ClusterFailurePolicy

trainer = ClusteredTaskEnvironment(
    name="durable", resources=shoal.Resources(cpu=1, memory="1Gi"), replicas=2,
    nproc_per_node=2,
    failure_policy=ClusterFailurePolicy(max_restarts=1, collective_timeout=30, grace_period=3),
)
driver = shoal.TaskEnvironment(name="durable-driver", depends_on=[trainer])


def _model(mode: str):  # type: ignore[no-untyped-def]
    import torch
    import torch.nn as nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    if mode == "fsdp":
        from torch.distributed.fsdp import fully_shard

        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer)
        return fully_shard(model)
    return model


@trainer.task
def train(steps: int, every: int, kill_at: int, out_dir: str, mode: str = "ddp",
          pause_at: int = -1) -> list[float]:
    import torch
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    ctx = shoal.ctx()
    cp = ctx.checkpoint
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = _model(mode)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    model_sd, opt_sd = get_state_dict(model, opt)
    state = {"model": model_sd, "optim": opt_sd}
    loaded = cp.load_state_dict(state)
    start = 0
    if loaded is not None:
        set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
        start = loaded + 1
    Path(out_dir, f"start-r{ctx.restart_attempt}-rank{rank}.json").write_text(
        json.dumps({"loaded": loaded, "start": start}))

    for step in range(start, steps):
        g = torch.Generator().manual_seed(1000 * step + rank)
        x = torch.randn(16, 8, generator=g)
        y = x.sum(dim=1, keepdim=True).sin()
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        if mode == "ddp":
            for p in model.parameters():  # data parallel with a fixed reduction layout
                dist.all_reduce(p.grad)
                p.grad /= dist.get_world_size()
        opt.step()
        if (step + 1) % every == 0:
            model_sd, opt_sd = get_state_dict(model, opt)
            cp.save_state_dict({"model": model_sd, "optim": opt_sd}, step=step, async_save=True)
        if step == kill_at and ctx.restart_attempt == 0:
            # Killed right after a save began, every rank has begun it, so the save before it
            # has landed on every rank (a save waits for this rank's one before; the last
            # shard to land commits it): the restart loads one of those two. Killed between
            # saves, the save begun last has landed on every rank first: the restart loads it.
            if (step + 1) % every != 0:
                cp.wait()
            dist.barrier()
        if step == kill_at and rank == 1 and ctx.restart_attempt == 0:
            os.kill(os.getpid(), signal.SIGKILL)  # right after an asynchronous save began
        if step == pause_at and not Path(out_dir, "no-more-pauses").exists():
            cp.wait()  # the save of the last saved step has landed: the test may kill now
            Path(out_dir, f"paused-rank{rank}").write_text("1")
            time.sleep(120)  # the test kills the driver here
    cp.wait()
    params = []
    for p in model.parameters():
        full = p.full_tensor() if hasattr(p, "full_tensor") else p
        params += [float(v) for v in full.detach().flatten()]
    dist.destroy_process_group()
    return params


@driver.task
async def pipeline(steps: int, every: int, out_dir: str, pause_at: int = -1) -> list[float]:
    return await train.aio(steps, every, -1, out_dir, "ddp", pause_at)
