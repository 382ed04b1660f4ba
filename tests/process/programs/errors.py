"""Tasks that fail the way a new user's tasks do, for tests/process/test_errors.py: what
`shoal run` prints for each is checked line by line there."""

from __future__ import annotations

import asyncio

import shoal
from shoal.clustered import ClusteredTaskEnvironment, ClusterFailurePolicy

env = shoal.TaskEnvironment(name="oops")
gang_env = ClusteredTaskEnvironment(
    name="oopsgang", resources=shoal.Resources(cpu=1, memory="1Gi"), replicas=2,
    nproc_per_node=2,
    failure_policy=ClusterFailurePolicy(max_restarts=0, collective_timeout=20, grace_period=2),
)
driver = shoal.TaskEnvironment(name="oopsdriver", depends_on=[env, gang_env])


def divide(n: int) -> int:
    return 10 // n


@env.task
def raises(n: int = 0) -> int:
    print(f"dividing 10 by {n}")
    return divide(n)


@env.task
async def calls_raises(n: int = 0) -> int:
    return await raises.aio(n)


@env.task
def wrong_output() -> int:
    return "seven"  # type: ignore[return-value]


@env.task
def takes_int(n: int) -> int:
    return n + 1


@env.task
async def passes_bad_input() -> int:
    return await takes_int.aio("x")  # type: ignore[arg-type]


@env.task
async def calls_sync_task(n: int = 1) -> int:
    return takes_int(n) + await takes_int.aio(n)  # the sync call waits here, as in Flyte 2


@env.task
async def sync_task_from_a_thread(n: int = 1) -> int:
    """A sync task called from a thread without a loop of its own blocks only that thread."""
    return await asyncio.to_thread(takes_int, n) + await takes_int.aio(n)


@env.task
def sync_calls_sync(n: int = 1) -> int:
    return takes_int(takes_int(n))


def check_shard(rank: int) -> None:
    all_ranks_here(rank)
    raise ValueError(f"rank {rank} found a bad shard")


@gang_env.task
def every_rank_raises() -> int:
    check_shard(shoal.ctx().rank or 0)
    return 0


@driver.task
async def calls_the_gang() -> int:
    return await every_rank_raises.aio()


def all_ranks_here(rank: int) -> None:
    """Every rank of the gang raises only once all have started: a rank that a faster peer's
    failure stops first would never print the error line the test reads. (Imports here: the
    line numbers above are the test's.)"""
    import os
    import signal
    import time
    from pathlib import Path

    from shoal import _contract as contract

    # The first rank to raise makes its node end the others (SIGTERM), which would cut a
    # peer's own error line short: each rank ignores it before it says it is here, so
    # every rank prints its error and ends by itself.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    folder = Path(os.environ[contract.RANK_LOG_DIR])
    (folder / f"here-{rank}").touch()
    deadline = time.monotonic() + 30
    while len(list(folder.glob("here-*"))) < (shoal.ctx().world_size or 1):
        if time.monotonic() > deadline:
            raise TimeoutError("the other ranks never started")
        time.sleep(0.01)
