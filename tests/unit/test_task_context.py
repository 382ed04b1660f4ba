"""`shoal.ctx()`'s deferred fields: made on the first read, once, whichever thread reads."""

from __future__ import annotations

import contextvars
import threading

import shoal
from shoal._runtime.context import Deferred, TaskContext, running


def test_a_deferred_checkpoint_is_made_once_on_its_first_read() -> None:
    made: list[object] = []
    ready = threading.Barrier(4)

    def make() -> object:
        made.append(object())
        return made[-1]

    deferred = Deferred(make)
    with running(TaskContext(run_name="r", action="a0", checkpoint=deferred)):
        assert not made and not deferred.made  # entering the call builds nothing
        seen: list[object] = []

        def read() -> None:
            ready.wait()
            seen.append(shoal.ctx().checkpoint)

        # Threads that carry the call's context (as `asyncio.to_thread` does) share it.
        threads = [threading.Thread(target=contextvars.copy_context().run, args=(read,))
                   for _ in range(3)]
        for t in threads:
            t.start()
        ready.wait()
        seen.append(shoal.ctx().checkpoint)
        for t in threads:
            t.join()
    assert len(made) == 1 and seen == made * 4 and deferred.value is made[0]
    assert shoal.ctx().checkpoint is None  # outside the call


def test_calling_a_task_reads_the_context_but_makes_no_checkpoint() -> None:
    made: list[object] = []
    env = shoal.TaskEnvironment(name="ctx-env")

    @env.task
    def plain(x: int) -> int:
        return x + 1

    deferred = Deferred(lambda: made.append(object()))
    with running(TaskContext(run_name="r", action="a0", checkpoint=deferred)):
        assert plain(1) == 2  # no client in this context: the plain function
        assert not made and not deferred.made
        shoal.ctx()  # the user's read makes it
        assert deferred.made
