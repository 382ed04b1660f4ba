"""The seed DDP example's training loop as a plain torch script: no Shoal, the baseline that
``gang_launch.py`` starts with two bare ``torchrun`` invocations (one per simulated node).

    python -m torch.distributed.run --nnodes=2 --nproc-per-node=2 --node-rank=0 \\
        --master-addr=127.0.0.1 --master-port=29500 --rdzv-backend=static \\
        benchmarks/programs_ddp_bare.py --steps 20        # and --node-rank=1 alongside

Same model, data, seed and steps as ``examples/seed/ddp.py``'s ``train_ddp`` (gloo on CPU).
Rank 0 prints ``FIRST_STEP <unix time>`` when step 0 has run and ``END <unix time>`` after the
last barrier: the benchmark reads both from its stdout.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def train_ddp(steps: int = 50, lr: float = 0.05) -> float:
    dist.init_process_group(backend="gloo")  # RANK, WORLD_SIZE, MASTER_* come from torchrun
    rank, world = dist.get_rank(), dist.get_world_size()
    print(f"[rank {rank}/{world}]", flush=True)

    torch.manual_seed(0)  # the same initial weights on every rank
    model = DDP(nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)

    g = torch.Generator().manual_seed(rank)  # each rank its own shard of synthetic data
    x = torch.randn(64, 4, generator=g)
    y = x.sum(dim=1, keepdim=True)

    loss_value = 0.0
    for step in range(steps):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        loss_value = float(loss.detach())
        if rank == 0 and step == 0:
            print(f"FIRST_STEP {time.time():.6f}", flush=True)
        if rank == 0 and step % 10 == 0:
            print(f"[rank 0] step {step:3d} loss {loss_value:.5f}", flush=True)

    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print(f"END {time.time():.6f}", flush=True)
    print(f"[rank {rank}] done, final loss {loss_value:.5f}", flush=True)
    return loss_value


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--lr", type=float, default=0.05)
    args = ap.parse_args()
    train_ddp(args.steps, args.lr)
