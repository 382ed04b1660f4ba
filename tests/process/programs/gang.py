"""Clustered tasks for the real-process gang tests (torch gloo on CPU, JAX on CPU)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import shoal as flyte
from shoal.clustered import ClusteredTaskEnvironment, ClusterFailurePolicy, JaxRun, TorchRun

RESOURCES = flyte.Resources(cpu=(1, 2), memory=("1Gi", "2Gi"))

ddp_env = ClusteredTaskEnvironment(
    name="ddp", resources=RESOURCES, replicas=2, nproc_per_node=2,
    runtime=TorchRun(rdzv_backend="static", max_restarts=0),
    failure_policy=ClusterFailurePolicy(max_restarts=1, collective_timeout=20, grace_period=3),
)
strict_env = ClusteredTaskEnvironment(
    name="strict", resources=RESOURCES, replicas=2, nproc_per_node=1,
    failure_policy=ClusterFailurePolicy(max_restarts=1, collective_timeout=20, grace_period=2),
)
resumable_env = ClusteredTaskEnvironment(
    name="resumable", resources=RESOURCES, replicas=2, nproc_per_node=1,
    failure_policy=ClusterFailurePolicy(max_restarts=0, resume_after_preemption=True,
                                        collective_timeout=20, grace_period=5),
)
jax_env = ClusteredTaskEnvironment(
    name="jaxgang", resources=RESOURCES, replicas=2, nproc_per_node=1, runtime=JaxRun(),
    failure_policy=ClusterFailurePolicy(collective_timeout=60),
)


@ddp_env.task
def train(steps: int = 30, lr: float = 0.05, die_at: int = -1, marker: str = "") -> float:
    """DDP on a tiny linear model; rank 1 kills itself at step ``die_at`` on the first start."""
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    ctx = flyte.ctx()
    dist.init_process_group(backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert rank == ctx.rank and world == ctx.world_size == 4
    torch.manual_seed(0)
    model = DDP(nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(64, 4, generator=g)
    y = x.sum(dim=1, keepdim=True)
    loss = torch.tensor(0.0)
    for step in range(steps):
        if step == die_at and rank == 1 and ctx.restart_attempt == 0:
            if marker:
                Path(marker).write_text(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        if rank == 0 and step % 10 == 0:
            print(f"step {step} loss {loss.item():.5f} restart {ctx.restart_attempt}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return float(loss.detach())


@strict_env.task
def topology(out_dir: str) -> dict[str, int]:
    """Every rank records what it sees; rank 0's view is returned."""
    ctx = flyte.ctx()
    seen = {
        "rank": ctx.rank, "local_rank": ctx.local_rank, "world_size": ctx.world_size,
        "node_rank": ctx.node_rank, "nnodes": ctx.nnodes, "restart": ctx.restart_attempt,
        "env_rank": int(os.environ["RANK"]), "env_world": int(os.environ["WORLD_SIZE"]),
        "pid": os.getpid(),
    }
    Path(out_dir, f"rank{ctx.rank}.json").write_text(json.dumps(seen))
    flyte.logger.info("topology seen by pid %d", seen["pid"])
    return {k: v for k, v in seen.items() if isinstance(v, int)}


@strict_env.task
def always_fails(rank_to_fail: int) -> int:
    import torch.distributed as dist

    dist.init_process_group(backend="gloo")
    if dist.get_rank() == rank_to_fail:
        print(f"rank {rank_to_fail} is about to fail", flush=True)
        raise RuntimeError(f"rank {rank_to_fail} broke on purpose")
    dist.barrier()  # the survivor waits here until the gang is stopped
    return 0


@strict_env.task
def wrong_type_on_rank1() -> int:
    return 7 if flyte.ctx().rank == 0 else "seven"  # type: ignore[return-value]


@strict_env.task
def hang_on_rank1(pidfile_dir: str) -> int:
    """Rank 1 stops answering (SIGSTOP itself): rank 0's collective must time out."""
    import torch
    import torch.distributed as dist

    dist.init_process_group(backend="gloo", timeout=__import__("datetime").timedelta(seconds=3))
    Path(pidfile_dir, f"rank{dist.get_rank()}.pid").write_text(str(os.getpid()))
    if dist.get_rank() == 1:
        os.kill(os.getpid(), signal.SIGSTOP)
    t = torch.ones(1)
    dist.all_reduce(t)
    return int(t.item())


@resumable_env.task
def wait_for_preemption(marker_dir: str) -> int:
    """First start: signal readiness, then wait (to be preempted). After: return the restart."""
    ctx = flyte.ctx()
    if ctx.restart_attempt == 0:
        Path(marker_dir, f"ready-{ctx.rank}").write_text("1")

        def on_term(signum: int, frame: object) -> None:
            Path(marker_dir, f"sigterm-{ctx.rank}").write_text("1")  # a checkpoint would go here
            os._exit(143)

        signal.signal(signal.SIGTERM, on_term)
        time.sleep(120)
    return int(ctx.restart_attempt or 0)


@jax_env.task
def jax_sum() -> float:
    """A cross-process reduction on CPU JAX: each process contributes (its index + 1)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import multihost_utils

    assert jax.process_count() == 2, jax.process_count()
    local = jnp.asarray([float(jax.process_index() + 1)])
    gathered = multihost_utils.process_allgather(local)
    return float(np.asarray(gathered).sum())


@jax_env.task
def jax_process1_dies() -> float:
    """Process 1 fails after initialisation; process 0 waits in a collective for it."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import multihost_utils

    if jax.process_index() == 1:
        raise RuntimeError("process 1 gives up")
    return float(multihost_utils.process_allgather(jnp.ones(1)).sum())
