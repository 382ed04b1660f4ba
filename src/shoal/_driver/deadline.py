"""`shoal.Timeout(deadline=...)`: one wall-clock budget for a whole call, on every engine.

The budget starts when the controller takes the call (Flyte's first QUEUED moment) and covers
every attempt, its wait for admission and the pauses between retries. Each attempt is handed to
the engine with its task's ``timeout`` (and ``max_queued_time``) lowered to what is left, so
the engine kills it the way it kills any attempt that runs too long (a local process tree, a
Kubernetes Job through ``activeDeadlineSeconds``). Where the engine does not bound it (a local
gang; a wait for admission longer than what is left), the controller cancels the attempt
``BACKSTOP`` seconds past the deadline. When
the deadline is what ran out, the call fails with kind ``"timeout"`` naming the deadline, and
no retry is spent on it (Flyte's rule: the deadline wins over the retry budget).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from dataclasses import replace

from shoal._engines.base import AttemptOutcome
from shoal._spec.call import CallSpec
from shoal.errors import FailureInfo

# Seconds past the deadline before the controller cancels an attempt the engine has not ended:
# longer than an engine needs to stop a process tree (SIGTERM, then SIGKILL after 2 s), so a
# kill the engine has begun is never interrupted.
BACKSTOP = 5.0


class PastDeadline(Exception):
    """The controller cancelled an attempt that outlived its call's deadline."""


class Deadline:
    """The deadline of one call: ``seconds`` from now, or none."""

    def __init__(self, seconds: float | None, retries: int) -> None:
        self.seconds = seconds
        self.retries = retries
        self.ends = None if seconds is None else time.monotonic() + seconds

    def left(self) -> float | None:
        return None if self.ends is None else self.ends - time.monotonic()

    def spent(self) -> bool:
        left = self.left()
        return left is not None and left <= 0

    def pause(self, delay: float) -> float:
        """The pause before a retry, cut short where the deadline ends first."""
        left = self.left()
        return delay if left is None else max(0.0, min(delay, left))

    def attempt_call(self, call: CallSpec) -> CallSpec:
        """``call`` with its attempt bounds lowered to what is left of the deadline."""
        left = self.left()
        if left is None:
            return call
        left = max(left, 0.001)
        task = call.task
        # A wait for admission is bounded by the deadline only where the task bounds it
        # already (Kubernetes refuses max_queued_time); elsewhere BACKSTOP covers it.
        return replace(call, task=replace(
            task, timeout=left if task.timeout is None else min(task.timeout, left),
            max_queued_time=None if task.max_queued_time is None
            else min(task.max_queued_time, left)))

    async def bound(self, attempt: Awaitable[AttemptOutcome]) -> AttemptOutcome:
        """The attempt's outcome; ``PastDeadline`` if it had to be cancelled."""
        left = self.left()
        if left is None:
            return await attempt
        try:
            return await asyncio.wait_for(attempt, max(left, 0.0) + BACKSTOP)
        except asyncio.TimeoutError:
            raise PastDeadline from None

    def failure(self, task: str, action: str, attempt: int) -> FailureInfo:
        assert self.seconds is not None  # only asked once the deadline is spent
        unused = self.retries - attempt
        return FailureInfo(
            task=task, action=action, attempt=max(attempt, 0), kind="timeout",
            message=f"ran past its deadline of {self.seconds:g}s (Timeout(deadline=...): one "
                    f"budget over all attempts), in attempt {attempt}"
                    + (f"; {unused} retr{'y was' if unused == 1 else 'ies were'} not used"
                       if unused > 0 else ""))
