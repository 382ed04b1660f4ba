"""Flyte 2's PyTorch-plugin shape (examples/plugins/torch_example.py), 2x1: a plain
`TaskEnvironment` made a gang by ``plugin_config=Elastic(nnodes=2, nproc_per_node=1)``, whose
task fits a line with DDP over gloo while a `DistributedSampler` hands each rank its own half
of the data. The task looks at the gang from inside (torch's world, `flyte.ctx()`'s topology,
the node each rank ran on, gathered onto rank 0, whose return value is the task's output)."""

import shoal as flyte
from shoal.plugins.pytorch import Elastic

env = flyte.TaskEnvironment(
    name="port_torch_elastic",
    resources=flyte.Resources(cpu=(1, 2), memory=("1Gi", "2Gi")),
    plugin_config=Elastic(nnodes=2, nproc_per_node=1),
)


@env.task
def fit_line(epochs: int) -> str:
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    # No rendezvous arguments: the engine set MASTER_ADDR/PORT, RANK and WORLD_SIZE.
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    # Eight points on y = 2x + 1; with shuffle=False rank r gets points r, r + world, ...
    xs = torch.arange(8, dtype=torch.float32).unsqueeze(1) / 4
    data = TensorDataset(xs, 2 * xs + 1)
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=False)
    loader = DataLoader(data, batch_size=8, sampler=sampler)

    torch.manual_seed(0)  # the same start on every rank (DDP also broadcasts rank 0's)
    model = DDP(nn.Linear(1, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    first = last = 0.0
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()  # DDP averages the two halves' gradients here
            opt.step()
            last = float(loss.detach())
            if epoch == 0:
                first = last
        if rank == 0:
            print(f"epoch {epoch}: loss {last:.4f}", flush=True)

    # What each rank saw: its node, its shard's size, its weights (equal if DDP synced them).
    ctx = flyte.ctx()
    mine = torch.tensor([float(ctx.node_rank or 0), float(len(sampler)),
                         float(model.module.weight.item())])
    every = [torch.zeros(3) for _ in range(world)]
    dist.all_gather(every, mine)
    dist.destroy_process_group()
    nodes = ",".join(str(int(t[0])) for t in every)
    shards = ",".join(str(int(t[1])) for t in every)
    in_sync = all(torch.allclose(t[2], every[0][2]) for t in every)
    return (f"world={world} ctx_world={ctx.world_size} nnodes={ctx.nnodes} "
            f"nodes={nodes} shards={shards} in_sync={in_sync} "
            f"first_loss={first:.4f} loss={last:.4f}")


if __name__ == "__main__":
    flyte.init_from_config()
    run = flyte.run(fit_line, epochs=30)
    run.wait()
    print(f"RESULT outputs {run.outputs()}")
    print(f"RESULT phase {run.phase}")
