"""A clustered DDP program written for GPUs, run 2x1: `init_process_group("nccl")`, tensors on
`cuda:<local rank>` only when `torch.cuda.is_available()`. On a laptop Shoal emulates the GPUs
on CPU and the "nccl" group runs on gloo, so the program runs unchanged."""

import shoal as flyte
from shoal.clustered import ClusteredTaskEnvironment, TorchRun

env = ClusteredTaskEnvironment(
    name="port_ddp_gpu",
    resources=flyte.Resources(cpu=1, memory="2Gi", gpu="L4:1"),
    replicas=2,
    nproc_per_node=1,
    runtime=TorchRun(rdzv_backend="static", max_restarts=0),
)


@env.task
async def train(steps: int) -> str:
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    ctx = flyte.ctx()
    if torch.cuda.is_available():
        torch.cuda.set_device(ctx.local_rank or 0)
        device = torch.device(f"cuda:{ctx.local_rank or 0}")
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend="nccl")
    rank, world = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(0)
    model = nn.Linear(4, 1).to(device)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(rank)  # each rank its own shard of y = x · [1, 1, 1, 1]
    x = torch.randn(64, 4, generator=g).to(device)
    y = x.sum(dim=1, keepdim=True)
    loss = torch.zeros(())
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()

    # DDP averages gradients, so every rank ends with the same weights.
    w = model.weight.detach().clone()
    dist.all_reduce(w)
    in_sync = bool(torch.allclose(w / world, model.weight.detach(), atol=1e-6))
    ranks = torch.tensor([float(rank)], device=device)
    dist.all_reduce(ranks)
    dist.destroy_process_group()
    final = float(loss.detach())
    return f"world={world} rank_sum={int(ranks.item())} in_sync={in_sync} loss={final:.4f}"


if __name__ == "__main__":
    flyte.init_from_config()
    run = flyte.run(train, steps=40)
    run.wait()
    print(f"RESULT outputs {run.outputs()}")
