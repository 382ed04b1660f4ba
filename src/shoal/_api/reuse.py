"""`ReusePolicy`: how many warm workers of an environment are kept, and for how long.

The local engine always reuses workers (a process runs call after call); the policy bounds that
reuse. ``replicas`` (an int, or Flyte's ``(min, max)``) is the most workers of the environment
kept warm at once; a call beyond them still runs, in a worker that exits when it is done.
``idle_ttl`` is how long an idle worker lives before it exits (Flyte's rule that it be at least
30 s is not kept: locally a short TTL costs only a restart). ``concurrency`` above 1 (several
calls in one process at once) is refused; ``scaledown_ttl`` has no meaning without autoscaling
and is accepted for code written for Flyte. On Kubernetes a plain task is a Job, and reuse
cannot apply: the engine warns once per environment.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass

from shoal._api.task_options import seconds
from shoal._spec.call import ReuseSpec
from shoal.errors import SpecError


@dataclass(frozen=True)
class ReusePolicy:
    replicas: int | tuple[int, int] = 2
    idle_ttl: _dt.timedelta | float = 30
    concurrency: int = 1
    scaledown_ttl: _dt.timedelta | float = 30
    scope: str = "global"

    def __post_init__(self) -> None:
        self.max_workers()
        if seconds("ReusePolicy.idle_ttl", self.idle_ttl, allow_zero=False) is None:
            raise SpecError("ReusePolicy.idle_ttl", self.idle_ttl, "must be > 0 seconds",
                            "e.g. idle_ttl=300")
        seconds("ReusePolicy.scaledown_ttl", self.scaledown_ttl)
        if isinstance(self.concurrency, bool) or not isinstance(self.concurrency, int) \
                or self.concurrency < 1:
            raise SpecError("ReusePolicy.concurrency", self.concurrency, "must be an int >= 1",
                            "e.g. concurrency=1")
        if self.concurrency > 1:
            calls = self.max_workers() * self.concurrency
            raise SpecError("ReusePolicy.concurrency", self.concurrency,
                            "above 1 is not supported: a Shoal worker runs one call at a time",
                            f"use concurrency=1 and replicas={calls}"
                            " (one call per warm worker, each in its own process)")
        if self.scope not in ("global", "run"):
            raise SpecError("ReusePolicy.scope", self.scope, 'must be "global" or "run"',
                            'use scope="run" (locally workers never outlive their run)')

    def max_workers(self) -> int:
        """The most warm workers kept: ``replicas``, or the max of a (min, max) pair."""
        r = self.replicas
        pair = r if isinstance(r, tuple) else (r, r)
        ok = (len(pair) == 2 and all(isinstance(n, int) and not isinstance(n, bool)
                                     for n in pair) and 1 <= pair[0] <= pair[1])
        if not ok:
            raise SpecError("ReusePolicy.replicas", r,
                            "must be an int >= 1 or a (min, max) pair with 1 <= min <= max",
                            "e.g. replicas=2 or replicas=(1, 4)")
        return pair[1]

    def spec(self) -> ReuseSpec:
        ttl = seconds("ReusePolicy.idle_ttl", self.idle_ttl)
        assert ttl is not None  # checked in __post_init__
        return ReuseSpec(max_workers=self.max_workers(), idle_ttl=ttl)
