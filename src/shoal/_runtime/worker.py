"""One worker process of one environment: takes `Run` orders and executes task calls.

Started by the local engine as ``python -m shoal._runtime.worker`` with the variables of
`shoal._contract.WorkerEnv`. It stays warm between calls (the user's module is imported
once), runs one call at a time, and writes each call's stdout/stderr to that call's log file.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import os
import sys
from contextlib import nullcontext
from typing import Any

from shoal._contract import RAY_INIT, WorkerEnv
from shoal._runtime import messages as m
from shoal._runtime.client import ControllerClient
from shoal._runtime.context import Deferred, TaskContext, running
from shoal._runtime.frameworks import join_ray_cluster
from shoal._runtime.loader import find_task
from shoal._runtime.observe import (
    exec_in_session,
    metrics_scope,
    profiling,
    profiling_scope,
    report_scope,
    wants_session,
)
from shoal._runtime.task_scopes import task_scopes
from shoal._runtime.tracebacks import through_call, user_traceback
from shoal._storage.private import FILE_MODE
from shoal.errors import FailureInfo, ShoalSystemError, TaskFailed


class _Redirect:
    """Point fds 1 and 2 (so also child processes and C code) at a call's log file, then back
    to what they were when the worker started (kept open for the worker's life)."""

    def __init__(self) -> None:
        self.saved = (os.dup(1), os.dup(2))

    def to(self, path: str) -> _Redirect:
        self.path = path
        return self

    def __enter__(self) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, FILE_MODE)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)

    def __exit__(self, *exc: object) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(self.saved[0], 1)
        os.dup2(self.saved[1], 2)


def passed_on(exc: BaseException) -> TaskFailed | None:
    """The failure of a task this one called, when that is what ``exc`` is."""
    if isinstance(exc, TaskFailed) and not getattr(exc, "raised_by_user", False):
        return exc
    return None


def _failure(order: m.Run, exc: BaseException, kind: str) -> FailureInfo:
    callee = passed_on(exc)
    if callee is not None:
        # The callee's traceback (under the frames of this call) and log tail: what a report
        # of this failure shows is where it began.
        i = callee.info
        return FailureInfo(task=order.task, action=order.action, attempt=order.attempt,
                           kind=kind, message=f"a task it called failed: {i.task} ({i.message})",
                           traceback=through_call(callee), log_tail=i.log_tail,
                           error_type=callee.code, origin_action=i.origin_action or i.action)
    return FailureInfo(task=order.task, action=order.action, attempt=order.attempt, kind=kind,
                       message=f"{type(exc).__name__}: {exc}", traceback=user_traceback(exc),
                       error_type=type(exc).__name__)


def _checkpoint(order: m.Run) -> Any:
    """The call's checkpoint; created lazily by nothing but a few attributes (no I/O)."""
    from shoal._contract import checkpoint_local_dir
    from shoal._storage.checkpoints import Checkpoint

    return Checkpoint(order.checkpoint_uri, local_dir=checkpoint_local_dir(order.checkpoint_uri),
                      gang_id=f"{order.run}:{order.attempt}")


class Worker:
    def __init__(self, wenv: WorkerEnv) -> None:
        self.wenv = wenv
        self.client = ControllerClient(wenv.controller, wenv.worker_id)
        self.loop = asyncio.new_event_loop()
        self.redirect = _Redirect()
        # What is the same for every call this process runs, worked out once: its profile
        # setting (the worker's environment), and the run's start as a datetime.
        self.profiled = profiling.setting() is not None
        self._run_start: tuple[float, _dt.datetime | None] = (0.0, None)

    def _run_start_time(self, epoch: float) -> _dt.datetime | None:
        if epoch != self._run_start[0]:
            self._run_start = (epoch, _dt.datetime.fromtimestamp(epoch, _dt.timezone.utc))
        return self._run_start[1]

    def serve(self) -> None:
        while True:
            order = self.client.orders.get()
            if order is None:
                return
            self.client.done(self.execute(order))

    def execute(self, order: m.Run) -> m.Done:
        with self.redirect.to(order.log_path):
            try:
                output = self._call(order)
            except KeyboardInterrupt:
                raise
            except BaseException as e:  # any exception (SystemExit too) fails the call
                kind = "system" if isinstance(e, ShoalSystemError) else "user"
                failure = _failure(order, e, kind)
                if failure.traceback and passed_on(e) is None:
                    # As Python would print it, in the task's log: its output, streamed live.
                    # A callee's failure was printed in the callee's log.
                    print(failure.traceback, end="", file=sys.stderr)
                return m.Done(order.action, order.attempt, failure=failure)
        return m.Done(order.action, order.attempt, output=output)

    def _call(self, order: m.Run) -> Any:
        from shoal._storage import codecs
        from shoal._storage.blobs import store_blobs

        task = find_task(order.code_file, order.task)
        blobs = store_blobs(self.wenv.store)
        kwargs = codecs.decode_inputs(order.inputs, task.hints, blobs=blobs, task=task.name,
                                      allow_pickle=task.allow_pickle)
        checkpoint = Deferred(lambda: _checkpoint(order)) if order.checkpoint_uri else None
        if os.environ.get(RAY_INIT):
            join_ray_cluster(os.environ[RAY_INIT])
        context = TaskContext(run_name=order.run, action=order.action, task=task.name,
                              env=task.env.name, attempt=order.attempt, client=self.client,
                              checkpoint=checkpoint, custom_context=dict(order.custom_context),
                              run_start_time=self._run_start_time(order.run_start))
        report = report_scope(task, store=self.wenv.store, run=order.run, action=order.action,
                              attempt=order.attempt)
        metrics = metrics_scope(self.wenv.home, order.run, order.action, order.attempt)
        profiled = profiling_scope(home=self.wenv.home, store=self.wenv.store, run=order.run,
                                   action=order.action, attempt=order.attempt, restart=0,
                                   rank=0) if self.profiled else nullcontext()
        try:
            with running(context), report, metrics.deferred(), profiled, task_scopes(task.scopes):
                if task.is_async:
                    value = self.loop.run_until_complete(task.func(**kwargs))
                else:
                    value = task.func(**kwargs)
        finally:
            if checkpoint is not None and checkpoint.value is not None:
                # An asynchronous save in flight must land (or fail) first.
                checkpoint.value.close()
        task.check_output(value)
        return codecs.encode(value, task.return_type, blobs=blobs,
                             field=f"output of task {task.name!r}", allow_pickle=task.allow_pickle)


def main() -> None:
    spec = profiling.setting()
    if wants_session(spec, rank=0):  # capture=task|manual: this worker runs in an nsys session
        assert spec is not None
        exec_in_session(spec, (sys.executable, "-m", "shoal._runtime.worker"),
                        "this task's worker")
    Worker(WorkerEnv.from_env()).serve()


if __name__ == "__main__":
    main()
