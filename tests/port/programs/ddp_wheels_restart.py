"""Flyte 2's clustered-example shape, 2x1: an image built from `flyte._image`'s PythonWheels
layer (the local SDK's wheels), a DDP body written for GPUs (`torch.cuda.set_device` unguarded,
`init_process_group("nccl")`, tensors on CUDA only when it is available), and a gang that fails
on its first attempt and succeeds on the restart `ClusterFailurePolicy(max_restarts=1)` allows,
told apart by `JOBSET_RESTART_ATTEMPT` as Flyte's restart example does."""

import os

import shoal as flyte
from shoal._image import DIST_FOLDER, PythonWheels
from shoal.clustered import ClusteredTaskEnvironment, ClusterFailurePolicy, TorchRun

image = (
    flyte.Image.from_debian_base(name="port_ddp_wheels")
    .clone(addl_layer=PythonWheels(wheel_dir=DIST_FOLDER, package_name="flyte"))
    .with_pip_packages("torch")
)

env = ClusteredTaskEnvironment(
    name="port_ddp_wheels",
    image=image,
    resources=flyte.Resources(cpu=1, memory="2Gi", gpu="L4:1"),
    replicas=2,
    nproc_per_node=1,
    runtime=TorchRun(rdzv_backend="static", max_restarts=0),
    failure_policy=ClusterFailurePolicy(max_restarts=1),
)


@env.task
async def train(steps: int) -> str:
    restart = int(os.environ.get("JOBSET_RESTART_ATTEMPT", "0") or "0")
    if restart == 0:
        raise RuntimeError("first attempt fails on purpose")

    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    local_rank = flyte.ctx().local_rank or 0
    torch.cuda.set_device(local_rank)  # before the process group, as NCCL code does
    dist.init_process_group(backend="nccl")
    device = torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")
    rank, world = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(0)
    model = nn.Linear(4, 1).to(device)
    ddp = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(64, 4, generator=g).to(device)
    y = x.sum(dim=1, keepdim=True)
    loss = torch.zeros(())
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
    w = model.weight.detach().clone()
    dist.all_reduce(w)
    in_sync = bool(torch.allclose(w / world, model.weight.detach(), atol=1e-6))
    dist.destroy_process_group()
    return f"world={world} restart={restart} in_sync={in_sync} loss={float(loss.detach()):.4f}"


if __name__ == "__main__":
    flyte.init_from_config()
    run = flyte.run(train, steps=40)
    run.wait()
    print(f"RESULT outputs {run.outputs()}")
    print(f"RESULT phase {run.phase}")
