"""Fully sharded data parallel (FSDP2) with a full checkpoint saved from rank 0 only.

    shoal run examples/seed/fsdp.py train_fsdp                  # 2 nodes x 2 processes
    shoal run examples/seed/fsdp.py train_fsdp --crash_at 25    # rank 1 dies once at step 25;
                                                                # the restarted gang continues
                                                                # from the step-19 checkpoint

Each of the four ranks holds a quarter of every parameter. To save, every rank takes part in
gathering the full state dict, which lands on rank 0 only (in CPU memory), and rank 0 alone
writes it to ``flyte.ctx().checkpoint``, so the ranks never write the same object. The
checkpoint lives in the object store (``SHOAL_STORE``), not on a node: a restart of the whole
gang, a retry of the task and ``shoal run --resume`` all find it, and the task loads it before
training. (``checkpoint.uri`` is where the saves go; ``checkpoint.path`` is a local scratch
folder for files you are about to save.)

A model too large to gather on one rank saves sharded instead: every rank writes its own shard
with ``ctx().checkpoint.save_state_dict(...)`` (torch.distributed.checkpoint underneath).
"""

from __future__ import annotations

import io

import shoal as flyte
from shoal.clustered import ClusteredTaskEnvironment, ClusterFailurePolicy, TorchRun

env = ClusteredTaskEnvironment(
    name="fsdp_env",
    image=flyte.Image.from_debian_base().with_pip_packages("torch"),
    resources=flyte.Resources(cpu=1, memory="2Gi"),
    replicas=2,
    nproc_per_node=2,
    runtime=TorchRun(),
    env_vars={"OMP_NUM_THREADS": "1"},
    failure_policy=ClusterFailurePolicy(max_restarts=1),  # one whole-gang restart
)


@env.task
async def train_fsdp(steps: int = 40, lr: float = 0.1, save_every: int = 10,
                     crash_at: int = -1) -> dict[str, float]:
    """Fit y = sin(sum(x) / √8) with a sharded MLP; return rank 0's losses and its first step."""
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        set_model_state_dict,
    )
    from torch.distributed.fsdp import fully_shard

    ctx = flyte.ctx()
    cp = ctx.checkpoint
    dist.init_process_group("gloo")
    rank = dist.get_rank()

    torch.manual_seed(0)  # the same initial weights everywhere, before sharding them
    model = nn.Sequential(nn.Linear(8, 64), nn.Tanh(), nn.Linear(64, 1))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)  # each layer's parameters are gathered only while it runs
    fully_shard(model)
    # Plain SGD keeps no state of its own; with Adam, save get_optimizer_state_dict(...) too.
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)

    # Continue from the latest checkpoint, if an earlier start of this call left one. Only
    # rank 0 reads it; set_model_state_dict sends every rank its own shards of it.
    start = 0
    latest = cp.latest()
    if latest is not None:
        full = {}
        if rank == 0:
            full = torch.load(io.BytesIO(await cp.load(step=latest)), weights_only=True)
        set_model_state_dict(model, full, options=StateDictOptions(
            full_state_dict=True, broadcast_from_rank0=True))
        start = latest + 1
        print(f"[rank {rank}] restart {ctx.restart_attempt}: loaded step {latest}, "
              f"continuing at step {start}", flush=True)

    first_loss = loss_value = float("nan")
    for step in range(start, steps):
        g = torch.Generator().manual_seed(1000 * step + rank)  # this rank's batch of this step
        x = torch.randn(32, 8, generator=g)
        y = (x.sum(dim=1, keepdim=True) / 8**0.5).sin()
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()  # FSDP reduce-scatters the gradients: each rank keeps its shard's
        optimizer.step()
        loss_value = float(loss.detach())
        first_loss = loss_value if step == start else first_loss
        if rank == 0 and step % 10 == 0:
            print(f"[rank 0] step {step:3d} loss {loss_value:.4f}", flush=True)

        if (step + 1) % save_every == 0 or step == steps - 1:
            # A collective: every rank sends its shards; only rank 0 receives the full tensors.
            full = get_model_state_dict(model, options=StateDictOptions(
                full_state_dict=True, cpu_offload=True))
            if rank == 0:
                buf = io.BytesIO()
                torch.save(full, buf)
                await cp.save(buf.getvalue(), step=step)
                print(f"[rank 0] saved the full state dict of step {step} to {cp.uri}",
                      flush=True)
            dist.barrier()  # nobody runs ahead (or crashes) before the save is committed

        if step == crash_at and rank == 1 and ctx.restart_attempt == 0:
            raise RuntimeError(f"rank 1 crashes at step {step}, as asked (--crash_at)")

    dist.destroy_process_group()
    return {"start_step": start, "first_loss": first_loss, "final_loss": loss_value}
