"""`ReusePolicy`: how many warm workers of an environment are kept, and for how long.

The local engine always reuses workers (a process runs call after call); the policy bounds that
reuse. ``replicas`` (an int, or Flyte's ``(min, max)``) is the most workers of the environment
kept warm at once; a call beyond them still runs, in a worker that exits when it is done.
``idle_ttl`` is how long an idle worker lives before it exits (Flyte's rule that it be at least
30 s is not kept: locally a short TTL costs only a restart). ``concurrency`` is how many calls
a replica serves at once; a Shoal worker runs one call at a time (its logs, its ``ctx()`` and
its memory limit are the call's), so ``replicas=10, concurrency=100`` keeps up to 1,000 warm
workers instead, said once per process: the same calls run at once (admission still bounds
them by their requests), each isolated in its own process, at the price of a process per call
in flight rather than per replica. ``scaledown_ttl`` has no meaning without autoscaling and is
accepted for code written for Flyte. On Kubernetes a plain task is a Job, and reuse
cannot apply: the engine warns once per environment.
"""

from __future__ import annotations

import datetime as _dt
import warnings
from dataclasses import dataclass

from shoal._api.task_options import seconds
from shoal._spec.call import ReuseSpec
from shoal.errors import SpecError

_noted: set[tuple[int, int]] = set()


def _note_concurrency(replicas: int, concurrency: int) -> None:
    if (replicas, concurrency) in _noted:
        return
    _noted.add((replicas, concurrency))
    warnings.warn(f"ReusePolicy(replicas={replicas}, concurrency={concurrency}): a Shoal worker "
                  f"runs one call at a time, so up to {replicas * concurrency} warm workers "
                  "serve the calls instead, each call in its own process", stacklevel=3)


@dataclass(frozen=True)
class ReusePolicy:
    replicas: int | tuple[int, int] = 2
    idle_ttl: _dt.timedelta | float = 30
    concurrency: int = 1
    scaledown_ttl: _dt.timedelta | float = 30
    scope: str = "global"

    def __post_init__(self) -> None:
        self.max_replicas()
        if seconds("ReusePolicy.idle_ttl", self.idle_ttl, allow_zero=False) is None:
            raise SpecError("ReusePolicy.idle_ttl", self.idle_ttl, "must be > 0 seconds",
                            "e.g. idle_ttl=300")
        seconds("ReusePolicy.scaledown_ttl", self.scaledown_ttl)
        if isinstance(self.concurrency, bool) or not isinstance(self.concurrency, int) \
                or self.concurrency < 1:
            raise SpecError("ReusePolicy.concurrency", self.concurrency, "must be an int >= 1",
                            "e.g. concurrency=1")
        if self.concurrency > 1:
            _note_concurrency(self.max_replicas(), self.concurrency)
        if self.scope not in ("global", "run"):
            raise SpecError("ReusePolicy.scope", self.scope, 'must be "global" or "run"',
                            'use scope="run" (locally workers never outlive their run)')

    def max_workers(self) -> int:
        """The most warm workers kept: the replicas times the calls each serves at once."""
        return self.max_replicas() * self.concurrency

    def max_replicas(self) -> int:
        """``replicas``, or the max of a (min, max) pair."""
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
