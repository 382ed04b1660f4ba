"""The seed DDP example (``examples/seed/ddp.py``) on Shoal, with wall-clock marks for
``gang_launch.py``; and a variant whose rank 1 kills itself, to time a whole-gang restart.

    shoal run benchmarks/programs_ddp_shoal.py train_ddp --steps 50
    shoal run benchmarks/programs_ddp_shoal.py train_recover --steps 50 --kill-at 5

Same model, data, seed, steps and gang (2 nodes x 2 processes, static rendezvous, one
whole-group restart) as the seed example, on CPU with gloo. Rank 0 prints marks, each
``NAME <unix time>``, into its rank log: ``BODY`` when the task body starts (before torch is
imported), ``TORCH`` once it is, ``PG`` once the process group exists, ``FIRST_STEP`` after
step 0 and ``END`` after the last barrier. In ``train_recover``, rank 1 prints ``KILL <t>`` and
SIGKILLs itself at step ``kill_at`` of the first start; Shoal restarts the whole gang and rank
0 prints ``FIRST_STEP <t> restart 1``.
"""

from __future__ import annotations

import shoal
from shoal.clustered import ClusteredTaskEnvironment, ClusterFailurePolicy, TorchRun


def _gang(name: str) -> ClusteredTaskEnvironment:
    return ClusteredTaskEnvironment(
        name=name,
        resources=shoal.Resources(cpu=(1, 2), memory=("1Gi", "2Gi")),
        replicas=2,
        nproc_per_node=2,
        runtime=TorchRun(rdzv_backend="static", max_restarts=0),
        failure_policy=ClusterFailurePolicy(max_restarts=1),
    )


ddp_env = _gang("ddp_env")
recover_env = _gang("recover_env")


def _train(steps: int, lr: float, kill_at: int | None) -> float:
    """The bare baseline's loop itself (``programs_ddp_bare.py``, next to this file), told
    which start of the gang this is."""
    from programs_ddp_bare import train_ddp as loop

    return loop(steps, lr, kill_at=kill_at, restart=shoal.ctx().restart_attempt or 0)


@ddp_env.task
async def train_ddp(steps: int = 50, lr: float = 0.05) -> float:
    """Fit y = x · [1, 1, 1, 1] with DDP; return rank 0's final loss."""
    return _train(steps, lr, kill_at=None)


@recover_env.task
async def train_recover(steps: int = 50, lr: float = 0.05, kill_at: int = 5) -> float:
    """As ``train_ddp``, but rank 1 SIGKILLs itself at step ``kill_at`` of the first start."""
    return _train(steps, lr, kill_at=kill_at)
