"""The seed DDP example (``examples/seed/ddp.py``) on Shoal, with wall-clock marks for
``gang_launch.py``; and a variant whose rank 1 kills itself, to time a whole-gang restart.

    shoal run benchmarks/programs_ddp_shoal.py train_ddp --steps 50
    shoal run benchmarks/programs_ddp_shoal.py train_recover --steps 50 --kill-at 5

Same model, data, seed, steps and gang (2 nodes x 2 processes, static rendezvous, one
whole-group restart) as the seed example, on CPU with gloo. Rank 0 prints marks, each
``NAME <unix time>``, into its rank log: ``BODY`` when the task body starts (before torch is
imported), ``TORCH`` once it is, ``PG`` once the process group exists, ``FIRST_STEP`` after
step 0 and ``END`` after the last barrier. In ``train_recover``, rank 1 prints ``KILL <t>`` and
SIGKILLs itself at step ``kill_at`` of the first start; Shoal restarts the whole gang and rank
0 prints ``FIRST_STEP <t> restart 1``.
"""

from __future__ import annotations

import os
import signal
import time

import shoal
from shoal.clustered import ClusteredTaskEnvironment, ClusterFailurePolicy, TorchRun


def _mark(name: str, extra: str = "") -> None:
    print(f"{name} {time.time():.6f}{extra}", flush=True)


def _gang(name: str) -> ClusteredTaskEnvironment:
    return ClusteredTaskEnvironment(
        name=name,
        resources=shoal.Resources(cpu=(1, 2), memory=("1Gi", "2Gi")),
        replicas=2,
        nproc_per_node=2,
        runtime=TorchRun(rdzv_backend="static", max_restarts=0),
        failure_policy=ClusterFailurePolicy(max_restarts=1),
    )


ddp_env = _gang("ddp_env")
recover_env = _gang("recover_env")


def _train(steps: int, lr: float, kill_at: int | None) -> float:
    """The seed example's loop; marks on rank 0, and rank 1's suicide when asked."""
    restart = shoal.ctx().restart_attempt or 0
    if os.environ.get("RANK") == "0":
        _mark("BODY")
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank0 = os.environ.get("RANK") == "0"
    if rank0:
        _mark("TORCH")
    dist.init_process_group(backend="gloo")  # RANK, WORLD_SIZE, MASTER_* are already set
    rank = dist.get_rank()
    if rank0:
        _mark("PG")

    torch.manual_seed(0)  # the same initial weights on every rank
    model = DDP(nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)

    g = torch.Generator().manual_seed(rank)  # each rank its own shard of synthetic data
    x = torch.randn(64, 4, generator=g)
    y = x.sum(dim=1, keepdim=True)

    loss_value = 0.0
    for step in range(steps):
        if kill_at is not None and restart == 0 and rank == 1 and step == kill_at:
            _mark("KILL")
            os.kill(os.getpid(), signal.SIGKILL)
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        loss_value = float(loss.detach())
        if rank == 0 and step == 0:
            _mark("FIRST_STEP", f" restart {restart}")
        if rank == 0 and step % 10 == 0:
            print(f"[rank 0] step {step:3d} loss {loss_value:.5f}", flush=True)

    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        _mark("END")
    print(f"[rank {rank}] done, final loss {loss_value:.5f}", flush=True)
    return loss_value


@ddp_env.task
async def train_ddp(steps: int = 50, lr: float = 0.05) -> float:
    """Fit y = x · [1, 1, 1, 1] with DDP; return rank 0's final loss."""
    return _train(steps, lr, kill_at=None)


@recover_env.task
async def train_recover(steps: int = 50, lr: float = 0.05, kill_at: int = 5) -> float:
    """As ``train_ddp``, but rank 1 SIGKILLs itself at step ``kill_at`` of the first start."""
    return _train(steps, lr, kill_at=kill_at)
