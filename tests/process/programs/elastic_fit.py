"""An elastic gang of 1 to 4 nodes x 1 rank, run where only 2 ranks fit: it starts smaller."""

from __future__ import annotations

import shoal
from shoal.clustered import ClusteredTaskEnvironment, ClusterFailurePolicy

fit_env = ClusteredTaskEnvironment(
    name="elastic_fit", replicas=4, min_replicas=1, nproc_per_node=1,
    failure_policy=ClusterFailurePolicy(collective_timeout=30, grace_period=2))


@fit_env.task
def world() -> dict[str, int]:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    ones = torch.ones(1)
    dist.all_reduce(ones)  # every rank of the start took part
    ctx = shoal.ctx()
    out = {"world": dist.get_world_size(), "summed": int(ones.item()),
           "nnodes": ctx.nnodes or 0, "max": ctx.max_nnodes or 0}
    dist.destroy_process_group()
    return out
