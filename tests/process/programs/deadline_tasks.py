"""Flyte 2-style tasks bounded by `Timeout(deadline=...)`: one that hangs on every attempt and
one that fails at once and is retried after long pauses."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import shoal as flyte
from shoal.clustered import ClusteredTaskEnvironment

env = flyte.TaskEnvironment(name="deadline")


@env.task(retries=5, timeout=flyte.Timeout(max_runtime=timedelta(seconds=1), deadline=2.5))
def hangs() -> int:
    time.sleep(30)
    return 1


@env.task(retries=flyte.RetryStrategy(count=4, backoff=flyte.Backoff(base=10)),
          timeout=flyte.Timeout(deadline=1.5))
def fails() -> int:
    raise RuntimeError("always")


@env.task(retries=2, timeout=flyte.Timeout(deadline=30))
def quick() -> int:
    return 7


gang_env = ClusteredTaskEnvironment(name="deadlinegang", replicas=1, nproc_per_node=2,
                                    resources=flyte.Resources(cpu=1, memory="1Gi"))


@gang_env.task(retries=3, timeout=flyte.Timeout(deadline=9.0))
def gang_hangs(marker_dir: str, until: float) -> int:
    # The deadline leaves the node's zygote time for its imports and the ranks for their
    # rendezvous, even on a loaded 2-core machine (over 4 s in CI): the ranks start, then hang
    # until the wall-clock time ``until``, past the deadline.
    rank = flyte.ctx().rank
    Path(marker_dir, f"rank{rank}-started").write_text("1")
    time.sleep(max(0.0, until - time.time()))
    Path(marker_dir, f"rank{rank}-woke").write_text("1")  # only if it was not stopped
    return 1


@gang_env.task(timeout=flyte.Timeout(deadline=0.3))
def gang_past_deadline_at_start(marker_dir: str) -> int:
    Path(marker_dir, f"rank{flyte.ctx().rank}-started").write_text("1")
    return 1
