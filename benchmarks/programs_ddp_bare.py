"""The seed DDP example's training loop as a plain torch script: no Shoal, the baseline that
``gang_launch.py`` starts with two bare ``torchrun`` invocations (one per simulated node).

    python -m torch.distributed.run --nnodes=2 --nproc-per-node=2 --node-rank=0 \\
        --master-addr=127.0.0.1 --master-port=29500 --rdzv-backend=static \\
        benchmarks/programs_ddp_bare.py --steps 50        # and --node-rank=1 alongside

Same model, data, seed and steps as ``examples/seed/ddp.py``'s ``train_ddp`` (gloo on CPU);
``programs_ddp_shoal.py`` runs this very function inside a Shoal task. Rank 0 prints
``NAME <unix time>`` lines, ``BODY`` before torch is imported, ``TORCH`` once it is, ``PG``
once the process group exists, ``FIRST_STEP`` after step 0 and ``END`` after the last barrier,
to the stdout torchrun gives it.
"""

from __future__ import annotations

import argparse
import os
import signal
import time


def _mark(name: str, extra: str = "") -> None:
    print(f"{name} {time.time():.6f}{extra}", flush=True)


def train_ddp(steps: int = 50, lr: float = 0.05, *, kill_at: int | None = None,
              restart: int | None = None) -> float:
    """The loop, with marks on rank 0. Under Shoal, ``restart`` is the gang's restart count (rank
    0 then prints ``FIRST_STEP <t> restart <n>``), and with ``kill_at`` rank 1 SIGKILLs itself
    (after printing ``KILL <t>``) at that step of the first start."""
    rank0 = os.environ.get("RANK") == "0"
    if rank0:
        _mark("BODY")
    # Imported here, as in the seed example's task body, so BODY -> TORCH is torch's import.
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    if rank0:
        _mark("TORCH")
    dist.init_process_group(backend="gloo")  # RANK, WORLD_SIZE, MASTER_* come from torchrun
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
        if kill_at is not None and not restart and rank == 1 and step == kill_at:
            _mark("KILL")
            os.kill(os.getpid(), signal.SIGKILL)
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        loss_value = float(loss.detach())
        if rank == 0 and step == 0:
            _mark("FIRST_STEP", "" if restart is None else f" restart {restart}")
        if rank == 0 and step % 10 == 0:
            print(f"[rank 0] step {step:3d} loss {loss_value:.5f}", flush=True)

    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        _mark("END")
    print(f"[rank {rank}] done, final loss {loss_value:.5f}", flush=True)
    return loss_value


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--kill-at", type=int, default=None,
                    help="rank 1 SIGKILLs itself at this step (slurm_launch.py's failed job)")
    args = ap.parse_args()
    train_ddp(args.steps, args.lr, kill_at=args.kill_at)
