"""The background writer of asynchronous checkpoint saves, and how it shares the CPUs.

An asynchronous save returns once its data is staged; one dedicated thread then writes and
hashes it, one save at a time, while training runs beside it. At full speed that thread and the
hashing pool took the cores training needs: on 2 cores training lost more than half its
steps/s while a 256 MiB save was in flight (the writer "at training's priority" rows of
benchmarks/results/*-checkpoint-io.md).

So the writer stands back, as long as nobody waits for it:

- Its thread runs at a lowered priority (nice + ``WriterSettings.nice``, 13 by default; Linux
  gives each thread its own nice value). This covers everything the save does on that thread,
  torch.distributed.checkpoint's serialization included, with no hook in anyone's loops.
- A thread running below its process's priority hashes each piece itself instead of handing
  it to the shared hashing pool (`deprioritized`): the pool's threads run sync saves and loads
  at normal priority, and a pool thread started from a lowered thread would inherit its nice
  value for good. The whole save is then one thread the scheduler puts behind training.
- It never starves. The kernel's fair scheduler gives a nice-13 thread a weight of 56 against
  1024 for training's threads: about a twentieth of a core when every core is busy, and all of
  any idle time (training waiting for data or a collective). A save whose work takes C
  CPU-seconds therefore lands within about 20 C seconds even under full load; nice 19 (weight
  15), tried first, left 256 MiB saves unfinished after 3 s of training.
- It becomes urgent when someone waits for it (the next save, ``wait()``, a load, ``close()``
  at the task's end) or once it has been in flight ``WriterSettings.deadline`` seconds: its
  thread goes back to its normal priority, and hashes in the pool again. Linux lets any thread
  lower its priority but raising it back needs CAP_SYS_NICE (root in most containers) or an
  RLIMIT_NICE of 20 or more; where refused, the save stays at its low priority, which costs
  nothing while the caller waits (training is blocked then, and the CPUs are the writer's).

The cost is a longer flight: a lowered save stays in flight several times as long as a sync save
takes, and training keeps most of its steps/s meanwhile. benchmarks/checkpoint_io.py measures
both writers side by side (lowered, and at training's priority), with the steps/s and the time
in flight of each; the figures are in benchmarks/results/*-checkpoint-io.md. Where other
processes keep every core busy too (data-loader workers), a lowered writer that must win the GIL
back after each write or hash waits longer for a core, and so does the training thread that
handed it the GIL: a smaller ``SHOAL_CHECKPOINT_WRITER_NICE`` (5) is the knob there.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from shoal import _contract as contract
from shoal._storage.settings import checked

__all__ = ["Writer", "WriterSettings", "deprioritized"]

T = TypeVar("T")

# Only Linux gives threads their own nice value; elsewhere ``setpriority`` with a thread's id
# would name a process, so nothing is lowered there.
_PER_THREAD_NICE = sys.platform.startswith("linux")


def _nice(tid: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, tid)


def deprioritized() -> bool:
    """Whether the calling thread runs below its process's (main thread's) priority: then it
    does its own hashing rather than queue work for normal-priority threads."""
    if not _PER_THREAD_NICE:
        return False
    return _nice(threading.get_native_id()) > _nice(os.getpid())


@dataclass(frozen=True)
class WriterSettings:
    """``nice``: added to the writer thread's nice value (0: it runs as training's threads do).
    ``deadline``: seconds a save may stand back before it is written at full speed."""

    nice: int = contract.DEFAULT_CHECKPOINT_WRITER_NICE
    deadline: float = contract.DEFAULT_CHECKPOINT_WRITER_DEADLINE

    @classmethod
    def from_env(cls) -> WriterSettings:
        nice = checked(
            contract.checkpoint_writer_nice, contract.CHECKPOINT_WRITER_NICE,
            "must be an integer from 0 to 19",
            f"unset it (default {contract.DEFAULT_CHECKPOINT_WRITER_NICE}), or set 0 to write "
            "asynchronous saves at training's priority")
        deadline = checked(
            contract.checkpoint_writer_deadline, contract.CHECKPOINT_WRITER_DEADLINE,
            "must be a number of seconds > 0",
            f"unset it (default {contract.DEFAULT_CHECKPOINT_WRITER_DEADLINE:g} s)")
        return cls(nice, deadline)


class _Job:
    __slots__ = ("urgent",)

    def __init__(self) -> None:
        self.urgent = False


class Writer:
    """One thread that runs asynchronous saves in the order submitted, at a lowered priority
    until each is urgent (``hurry()``, or its deadline)."""

    def __init__(self, name: str, settings: WriterSettings) -> None:
        self.settings = settings
        self._pool = ThreadPoolExecutor(1, thread_name_prefix=name, initializer=self._started)
        self._lock = threading.Lock()
        self._jobs: set[_Job] = set()  # submitted, not finished
        self._running: _Job | None = None
        self._tid: int | None = None
        self._normal = 0  # the thread's nice value as it started

    @property
    def thread_id(self) -> int | None:
        """The native id of the writer's thread, once it has started."""
        return self._tid

    def _started(self) -> None:
        self._tid = threading.get_native_id()
        if _PER_THREAD_NICE:
            self._normal = _nice(self._tid)

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        job = _Job()
        with self._lock:
            self._jobs.add(job)
        return self._pool.submit(self._run, job, fn, *args)

    def hurry(self) -> None:
        """Someone waits: every save submitted goes at full speed from now on."""
        with self._lock:
            for job in self._jobs:
                job.urgent = True
            self._restore()

    def shutdown(self) -> None:
        self.hurry()
        self._pool.shutdown()

    def _run(self, job: _Job, fn: Callable[..., T], *args: Any) -> T:
        deadline = threading.Timer(self.settings.deadline, self._expire, (job,))
        deadline.daemon = True
        deadline.start()
        with self._lock:
            self._running = job
            if not job.urgent:
                self._lower()
        try:
            return fn(*args)
        finally:
            deadline.cancel()
            with self._lock:
                self._running = None
                self._jobs.discard(job)

    def _expire(self, job: _Job) -> None:
        with self._lock:
            job.urgent = True
            if self._running is job:
                self._restore()

    def _lower(self) -> None:
        if not _PER_THREAD_NICE or self._tid is None or not self.settings.nice:
            return
        target = min(19, self._normal + self.settings.nice)
        if target > _nice(self._tid):
            try:
                os.setpriority(os.PRIO_PROCESS, self._tid, target)
            except PermissionError:  # a sandbox forbidding setpriority: write at full speed
                return

    def _restore(self) -> None:
        if not _PER_THREAD_NICE or self._tid is None or _nice(self._tid) <= self._normal:
            return
        try:
            os.setpriority(os.PRIO_PROCESS, self._tid, self._normal)
        except PermissionError:  # no CAP_SYS_NICE: see the module's docstring
            return
