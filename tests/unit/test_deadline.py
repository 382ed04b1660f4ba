"""`Timeout(deadline=...)` in the controller, by value: each attempt's bounds lowered to what
is left, the backstop that cancels an attempt the engine did not end, and the failure."""

from __future__ import annotations

import asyncio
import time

import pytest

import shoal
from shoal._driver.deadline import Deadline, PastDeadline
from shoal._engines.base import AttemptOutcome

env = shoal.TaskEnvironment(name="dl")


@env.task(retries=3, timeout=shoal.Timeout(max_runtime=100, deadline=10))
def bounded() -> int:
    return 1


@env.task(retries=1, timeout=shoal.Timeout(max_runtime=2, max_queued_time=50, deadline=10))
def short() -> int:
    return 1


def test_no_deadline_changes_nothing() -> None:
    d = Deadline(None, 3)
    call = bounded.make_call((), {}, parent_action=None)
    assert d.attempt_call(call) is call and not d.spent() and d.left() is None


def test_each_attempt_gets_what_is_left_but_never_more_than_its_own_bounds() -> None:
    d = Deadline(10, 3)
    lowered = d.attempt_call(bounded.make_call((), {}, parent_action=None)).task
    assert 9.5 < lowered.timeout <= 10 and lowered.max_queued_time is None  # type: ignore[operator]
    kept = d.attempt_call(short.make_call((), {}, parent_action=None)).task
    assert kept.timeout == 2 and 9.5 < kept.max_queued_time <= 10  # type: ignore[operator]
    d.ends = time.monotonic() - 1
    assert d.spent()
    assert d.attempt_call(bounded.make_call((), {}, parent_action=None)).task.timeout == 0.001


def test_the_failure_names_the_deadline_and_the_unused_retries() -> None:
    info = Deadline(10, 3).failure("dl.bounded", "a0", 1)
    assert (info.kind, info.attempt) == ("timeout", 1)
    assert info.message == ("ran past its deadline of 10s (Timeout(deadline=...): one budget "
                            "over all attempts), in attempt 1; 2 retries were not used")
    assert Deadline(10, 0).failure("t", "a0", 0).message.endswith("in attempt 0")


def test_the_backstop_cancels_an_attempt_the_engine_did_not_end(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("shoal._driver.deadline.BACKSTOP", 0.05)
    cancelled = []

    async def stuck() -> AttemptOutcome:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return AttemptOutcome(output=1)

    async def main() -> float:
        t0 = time.monotonic()
        with pytest.raises(PastDeadline):
            await Deadline(0.1, 0).bound(stuck())
        return time.monotonic() - t0

    assert 0.14 < asyncio.run(main()) < 1.0 and cancelled == [True]
    assert asyncio.run(Deadline(5, 0).bound(asyncio.sleep(0, AttemptOutcome(output=7)))
                       ).output == 7
