"""Data-parallel training across a gang of nodes: the seed document's DDP pattern on Shoal.

    shoal run examples/seed/ddp.py train_ddp                       # 2 nodes x 2 processes
    shoal run examples/seed/ddp.py train_ddp --override ddp_env.replicas=4 \\
        --override ddp_env.nproc_per_node=1                       # 4 nodes x 1 process
    SHOAL_EXAMPLE_GPU=1 shoal run ...                               # NCCL on GPU nodes

Code written against Flyte 2 runs unchanged but for its imports: the two lines below are the
only Shoal-specific ones. Every rank runs `train_ddp`; rank 0's return value is the output.
"""

from __future__ import annotations

import os

import shoal as flyte
from shoal.clustered import ClusteredTaskEnvironment, ClusterFailurePolicy, TorchRun

USE_GPU = os.environ.get("SHOAL_EXAMPLE_GPU") == "1"
REPLICAS = 2  # nodes (pods) in the gang
NPROC_PER_NODE = 2  # processes per node (one per GPU on GPU nodes)
_BACKEND = "nccl" if USE_GPU else "gloo"

image = flyte.Image.from_debian_base().with_pip_packages("torch", "numpy")
resources = (
    flyte.Resources(cpu=(2, 4), memory=("4Gi", "8Gi"), gpu="L4:1")
    if USE_GPU
    else flyte.Resources(cpu=(1, 2), memory=("1Gi", "2Gi"))
)

env = ClusteredTaskEnvironment(
    name="ddp_env",
    image=image,
    resources=resources,
    replicas=REPLICAS,
    nproc_per_node=NPROC_PER_NODE if not USE_GPU else 1,
    runtime=TorchRun(rdzv_backend="static", max_restarts=0),
    failure_policy=ClusterFailurePolicy(max_restarts=1),
)


@env.task
async def train_ddp(steps: int = 50, lr: float = 0.05) -> float:
    """Fit y = x · [1, 1, 1, 1] with DDP; return rank 0's final loss."""
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    ctx = flyte.ctx()
    # NCCL must see this rank's GPU before the process group exists.
    if _BACKEND == "nccl" and torch.cuda.is_available():
        torch.cuda.set_device(ctx.local_rank or 0)
        device = torch.device(f"cuda:{ctx.local_rank or 0}")
    else:
        device = torch.device("cpu")

    dist.init_process_group(backend=_BACKEND)  # RANK, WORLD_SIZE, MASTER_* are already set
    rank, world = dist.get_rank(), dist.get_world_size()
    print(f"[rank {rank}/{world}] node {ctx.node_rank}/{ctx.nnodes} master {ctx.master_addr}",
          flush=True)

    torch.manual_seed(0)  # the same initial weights on every rank
    model = DDP(nn.Linear(4, 1).to(device),
                device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)

    # Each rank owns its own shard of synthetic data; DDP averages the gradients.
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(64, 4, generator=g).to(device)
    y = x.sum(dim=1, keepdim=True)

    loss_value = 0.0
    for step in range(steps):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        loss_value = float(loss.detach())
        if rank == 0 and step % 10 == 0:
            print(f"[rank 0] step {step:3d} loss {loss_value:.5f}", flush=True)

    dist.barrier()
    dist.destroy_process_group()
    print(f"[rank {rank}] done, final loss {loss_value:.5f}", flush=True)
    return loss_value
