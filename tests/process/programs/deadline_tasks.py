"""Flyte 2-style tasks bounded by `Timeout(deadline=...)`: one that hangs on every attempt and
one that fails at once and is retried after long pauses."""

from __future__ import annotations

import time
from datetime import timedelta

import shoal as flyte

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
