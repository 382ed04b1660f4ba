"""A 2 nodes x 2 ranks gang that opens W&B runs by each ``run_mode`` x ``rank_scope``.

The task is ``@wandb_init(rank_scope="worker")`` with ``run_mode`` from the run's
``wandb_config`` (auto): the decorator's own run. Inside, each rank opens the five other
combinations in turn through the same scope the decorator uses, each under a base of its own
(``{run}-{action}-{mode}-{scope}``) so their ids do not collide, and logs its rank under the
combination's key; every rank checks which ranks got a run. One gang start covers the table.
"""

from __future__ import annotations

import shoal
from shoal._plugins.wandb.task_run import task_run
from shoal.clustered import ClusteredTaskEnvironment, TorchRun
from shoal.plugins.wandb import (
    get_distributed_info,
    get_wandb_context,
    get_wandb_run,
    wandb_init,
)
from shoal.plugins.wandb.decorators import WandbInit

gang = ClusteredTaskEnvironment(
    name="wandb_gang", replicas=2, nproc_per_node=2,
    resources=shoal.Resources(cpu=(1, 2), memory=("1Gi", "2Gi")),
    runtime=TorchRun(rdzv_backend="static"),
)
OTHERS = [("auto", "global"), ("shared", "global"), ("shared", "worker"), ("new", "global"),
          ("new", "worker")]


def _logs(run_mode: str, rank_scope: str, info: dict[str, int]) -> bool:
    """Whether this rank should hold a run (Flyte's table)."""
    if run_mode != "auto":
        return True
    return info["local_rank"] == 0 if rank_scope == "worker" else info["rank"] == 0


@wandb_init(rank_scope="worker")
@gang.task
def matrix() -> dict[str, int]:
    c = shoal.ctx()
    info = get_distributed_info()
    assert info == {"rank": c.rank, "local_rank": c.local_rank, "world_size": 4,
                    "local_world_size": 2, "worker_index": c.node_rank, "num_workers": 2}, info
    config = get_wandb_context()
    assert config is not None and config.project == "shoal-wandb-matrix", config
    own = get_wandb_run()
    assert (own is not None) == _logs("auto", "worker", info), (c.rank, own)
    if own is not None:
        own.log({"auto_worker": c.rank})
    shoal.log_metrics({"mirrored": float(c.rank or 0)}, step=7)
    base = f"{c.run_name}-{c.action}"
    for run_mode, rank_scope in OTHERS:
        scope = WandbInit(run_mode=run_mode, rank_scope=rank_scope)  # type: ignore[arg-type]
        with task_run(scope, base=f"{base}-{run_mode}-{rank_scope}") as run:
            assert (run is not None) == _logs(run_mode, rank_scope, info), (c.rank, run_mode)
            assert get_wandb_run() is run or run is None
            if run is not None:
                run.log({f"{run_mode}_{rank_scope}": c.rank})
        assert own is None or get_wandb_run() is own  # the decorator's run is back
    return info
