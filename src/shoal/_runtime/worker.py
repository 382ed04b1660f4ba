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
import threading
import time
from contextlib import nullcontext, suppress
from typing import Any

from shoal._contract import RAY_INIT, WorkerEnv
from shoal._runtime import messages as m
from shoal._runtime.client import ControllerClient
from shoal._runtime.context import Deferred, TaskContext, running
from shoal._runtime.frameworks import join_ray_cluster
from shoal._runtime.loader import find_task
from shoal._runtime.log_files import LINK_AFTER_SECONDS, spool_path
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


class CallOutput:
    """Points fds 1 and 2 (so also child processes and C code) at a call's output, then back to
    what they were when the worker started (kept open for the worker's life).

    A call writes to the worker's spool (`log_files.spool_path`), and gets a log file of its own
    only when it needs one: renamed from the spool when it ends having printed, hard-linked
    from it by a watcher thread once it has run `LINK_AFTER_SECONDS` (a follower then reads its
    output live, and the rest streams on). An empty spool serves the next call: a fan-out's
    silent calls create no file (creating one cost 0.02 ms here, 0.2-0.5 ms in a crowded
    folder). What a call leaves running in the background and prints later, after its call
    ended silently, shows in a later call's log.
    """

    def __init__(self, worker_id: str) -> None:
        self.saved = (os.dup(1), os.dup(2))
        self.worker_id = worker_id
        self._spool: tuple[str, str, int] | None = None  # its folder, path and open fd
        self._cond = threading.Condition()
        self._call: tuple[int, str, str] | None = None  # running: (number, log, spool)
        self._calls = 0
        self._linked = False
        self._watcher: threading.Thread | None = None

    def to(self, path: str) -> CallOutput:
        self.path = path
        return self

    def _spool_fd(self) -> tuple[str, int]:
        """The spool beside this call's log, made when there is none there (a run's calls
        share one folder: the path is worked out only when a spool is made)."""
        folder = os.path.dirname(self.path)
        if self._spool is not None and self._spool[0] != folder:
            self._drop_spool()
        if self._spool is None:
            spool = str(spool_path(folder, self.worker_id))
            fd = os.open(spool, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, FILE_MODE)
            self._spool = (folder, spool, fd)
        return self._spool[1:]

    def __enter__(self) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        spool, fd = self._spool_fd()
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        with self._cond:
            self._calls += 1
            self._call, self._linked = (self._calls, self.path, spool), False
            self._cond.notify()
        if self._watcher is None:
            self._watcher = threading.Thread(target=self._watch, daemon=True,
                                             name="shoal-call-output")
            self._watcher.start()

    def __exit__(self, *exc: object) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(self.saved[0], 1)
        os.dup2(self.saved[1], 2)
        with self._cond:
            self._call = None
            linked = self._linked
            self._cond.notify()
        assert self._spool is not None
        _, spool, fd = self._spool
        try:
            if linked:  # the call's log is the spool's file under its own name
                os.unlink(spool)
            elif os.fstat(fd).st_size:
                os.rename(spool, self.path)
            else:
                return  # nothing printed: the spool serves the next call
        except OSError:
            pass  # kept out of the way; the next call starts a new spool
        os.close(fd)
        self._spool = None

    def _watch(self) -> None:
        while True:
            with self._cond:
                while self._call is None:
                    self._cond.wait()
                number, log, spool = self._call
            time.sleep(LINK_AFTER_SECONDS)
            with self._cond:
                if self._call is not None and self._call[0] == number and not self._linked:
                    with suppress(OSError):  # no hard links here: renamed at the end
                        os.link(spool, log)
                        self._linked = True
                while self._call is not None and self._call[0] == number:
                    self._cond.wait()

    def _drop_spool(self) -> None:
        if self._spool is not None:
            _, spool, fd = self._spool
            with suppress(OSError):
                if not os.fstat(fd).st_size:
                    os.unlink(spool)
            os.close(fd)
            self._spool = None

    def close(self) -> None:
        """The worker ends: an empty spool removed."""
        self._drop_spool()


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
        self.redirect = CallOutput(wenv.worker_id)
        # What is the same for every call this process runs, worked out once: its profile
        # setting (the worker's environment), and the run's start as a datetime.
        self.profiled = profiling.setting() is not None
        self._run_start: tuple[float, _dt.datetime | None] = (0.0, None)

    def _run_start_time(self, epoch: float) -> _dt.datetime | None:
        if epoch != self._run_start[0]:
            self._run_start = (epoch, _dt.datetime.fromtimestamp(epoch, _dt.timezone.utc))
        return self._run_start[1]

    def serve(self) -> None:
        try:
            while True:
                order = self.client.orders.get()
                if order is None:
                    return
                self.client.done(self.execute(order))
        finally:
            self.redirect.close()

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
