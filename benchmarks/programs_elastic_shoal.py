"""The elastic gang of ``elastic_recovery.py`` on Shoal: 1 to 2 nodes × 1 rank.

    shoal run benchmarks/programs_elastic_shoal.py train --folder DIR --every 5

The step body is the bare side's (``programs_elastic_bare.loop``, next to this file); the
state goes to ``shoal.ctx().checkpoint`` (``save_sync`` on rank 0, every ``every`` steps),
which is also what tells the engine when a node that came back can join (at the next commit).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import shoal
from shoal.clustered import ClusteredTaskEnvironment, ClusterFailurePolicy

elastic_env = ClusteredTaskEnvironment(
    name="elastic_bench",
    resources=shoal.Resources(cpu=1, memory="512Mi"),
    replicas=2,
    min_replicas=1,
    nproc_per_node=1,
    failure_policy=ClusterFailurePolicy(max_restarts=1, monitor_interval=2, grace_period=2,
                                        collective_timeout=30),
    # As the bare side's agents run (and the pretrain example's gang): one OpenMP thread. It
    # also lets each node's launcher import torch once and fork every start's rank: with
    # torch's own threads running it starts each rank afresh, a torch import per start.
    env_vars={"OMP_NUM_THREADS": "1"},
)


@elastic_env.task
def train(folder: str, every: int = 5) -> dict[str, int]:
    """Train until ``folder/stop`` exists; the last step and the world size it ended at."""
    from programs_elastic_bare import loop

    ctx = shoal.ctx()
    cp = ctx.checkpoint
    raw = cp.load_sync()
    state: dict[str, Any] | None = json.loads(raw) if isinstance(raw, bytes) else None

    def save(st: dict[str, Any], step: int) -> None:
        cp.save_sync(json.dumps(st).encode(), step=step)

    return loop(Path(folder), every, int(ctx.restart_attempt or 0), state, save)
