"""Gangs that hang: a rank that freezes (SIGSTOP), a rank stuck in a sleep outside collectives."""

from __future__ import annotations

import os
import signal
import time

import shoal
from shoal.clustered import ClusteredTaskEnvironment, ClusterFailurePolicy

RES = shoal.Resources(cpu=1, memory="512Mi")
FREEZE_AT = 3  # the step after which the hanging rank stops answering

frozen_env = ClusteredTaskEnvironment(
    name="frozen", resources=RES, replicas=2, nproc_per_node=2,
    failure_policy=ClusterFailurePolicy(collective_timeout=10, grace_period=1),
)
stuck_env = ClusteredTaskEnvironment(
    name="stuck", resources=RES, replicas=2, nproc_per_node=1,
    failure_policy=ClusterFailurePolicy(collective_timeout=60, progress_timeout=3,
                                        grace_period=1),
)


def stuck_in_sleep() -> None:
    """Where the stuck rank is: its stack must show this function."""
    time.sleep(120)


def _train(hang_rank: int, hang: str) -> float:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    t = torch.ones(1)
    for step in range(200):
        dist.all_reduce(t)
        t /= dist.get_world_size()
        shoal.log_metrics({"value": float(t.item())}, step=step)
        time.sleep(0.05)
        if step == FREEZE_AT and dist.get_rank() == hang_rank:
            time.sleep(1.0)  # a real step takes a while: the status file has shown step 3
            if hang == "freeze":
                os.kill(os.getpid(), signal.SIGSTOP)
            else:
                stuck_in_sleep()
    return float(t.item())


@frozen_env.task
def freezes() -> float:
    """Rank 3 SIGSTOPs itself after step 3; ranks 0-2 wait in all_reduce until it times out."""
    return _train(3, "freeze")


@stuck_env.task
def sleeps() -> float:
    """Rank 1 sleeps after step 3, outside any collective; rank 0 waits in all_reduce."""
    return _train(1, "sleep")
