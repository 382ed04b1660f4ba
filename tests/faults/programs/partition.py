"""A seed-style DDP loop on a gang of 2 nodes x 1 rank (gloo), whose link the test cuts.

Rank 0 writes ``$FAULTS_MARKER_DIR/step<restart>`` once training is under way, so the test
cuts the link mid-training; the restart after the partition heals runs to the end.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import shoal
from shoal.clustered import ClusteredTaskEnvironment, ClusterFailurePolicy

CUT_AFTER = 10  # the step after which rank 0 tells the test that training is under way
STEPS = 60

env = ClusteredTaskEnvironment(
    name="partitioned", resources=shoal.Resources(cpu=1, memory="512Mi"), replicas=2,
    nproc_per_node=1,
    failure_policy=ClusterFailurePolicy(collective_timeout=5, grace_period=1, max_restarts=1),
)


@env.task
def train(steps: int = STEPS) -> float:
    """Fit y = x · [1, 1, 1, 1] with DDP; rank 0's final loss."""
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(64, 4, generator=g)
    y = x.sum(dim=1, keepdim=True)
    loss_value = 0.0
    for step in range(steps):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()  # DDP's all_reduce of the gradients: where a partition is felt
        optimizer.step()
        loss_value = float(loss.detach())
        shoal.log_metrics({"loss": loss_value}, step=step)
        if rank == 0 and step == CUT_AFTER:
            restart = shoal.ctx().restart_attempt or 0
            (Path(os.environ["FAULTS_MARKER_DIR"]) / f"step{restart}").touch()
        time.sleep(0.05)
    dist.destroy_process_group()
    return loss_value
