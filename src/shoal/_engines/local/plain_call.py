"""One attempt of a plain call (not a gang's) on the local engine.

The call is admitted against the machine's pool, given a warm worker of its environment (or a
new one), and watched until it ends: its result, its crash (exit code or signal, log tail),
its memory past the environment's limit, or its timeout (the whole process tree is killed).
While it runs, the calls it makes borrow its reservation (`LocalEngine.running`). A clustered
call's attempt is `gang.GangRunner`'s.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import TYPE_CHECKING

from shoal import _contract as contract
from shoal._engines.base import AttemptOutcome, AttemptRef
from shoal._engines.local import procs
from shoal._engines.local.workers import Worker, WorkerDied, WorkerStartFailed
from shoal._runtime import messages as m
from shoal._runtime.log_files import log_tail, rescue_spool, spool_path
from shoal._runtime.observe import CallSampler, open_writer
from shoal._spec.call import CallSpec
from shoal.errors import FailureInfo

if TYPE_CHECKING:
    from shoal._engines.local.engine import LocalEngine

# Seconds between SIGTERM and SIGKILL when a call times out or is cancelled.
KILL_GRACE = 2.0
# How often a running task's memory is compared with its limit: a task that overshoots by a
# lot within one interval is caught at the next sample, as a cgroup would have killed it.
MEMORY_SAMPLE_SECONDS = 0.25
# A call still running this long is watched (memory limit, system metrics); one that ends
# sooner, as most calls of a fan-out do, costs no look at the machine's process table, which
# takes milliseconds of CPU, more than the call itself.
WATCH_AFTER_SECONDS = 0.05


class OutOfMemory(Exception):
    """A task's processes went past its memory limit (internal; becomes kind "oom")."""


class PlainCall:
    """One attempt of ``call`` (``ref``) in a worker process of its environment."""

    def __init__(self, engine: LocalEngine, call: CallSpec, ref: AttemptRef) -> None:
        self.engine = engine
        self.call = call
        self.ref = ref

    async def run(self) -> AttemptOutcome:
        engine, call, ref = self.engine, self.call, self.ref
        workers = engine.workers
        facts = engine.facts(call.task.env, call.task.code_file)
        reservation = await engine.admit_within(call, facts.request, priority=facts.priority,
                                                label=ref.action)
        if reservation is None:
            return engine.queued_too_long(call, ref)
        worker: Worker | None = None
        engine.running[ref.action] = (reservation, set())
        try:
            fresh = call.task.env.reuse is not None and call.task.env.reuse.max_workers == 0
            worker = (None if fresh  # task.override(reusable="off")
                      else workers.take_idle(engine.warm_key(
                          call.task.env, call.task.code_file, reservation.gpus)))
            try:
                worker = worker or await engine.spawn(call.task.env, call.task.code_file,
                                                      reservation.gpus)
            except WorkerStartFailed as e:  # killed while starting: this attempt crashed
                code, sig = procs.describe_exit(e.returncode)
                return AttemptOutcome(failure=FailureInfo(
                    task=call.task.name, action=ref.action, attempt=ref.attempt, kind="crash",
                    message=f"{e.why} before it took the call", exit_code=code, signal=sig,
                    log_tail=e.log_tail))
            return await self._served_by(worker)
        finally:
            _, children = engine.running.pop(ref.action, (None, set()))
            for t in children:
                t.cancel()
            reservation.release()
            if worker is not None:
                workers.give_back(worker, call.task.env.reuse)

    async def _served_by(self, worker: Worker) -> AttemptOutcome:
        """The attempt's outcome, ``worker`` given its order."""
        engine, call, ref = self.engine, self.call, self.ref
        order = m.Run(run=ref.run, action=ref.action, attempt=ref.attempt,
                      task=call.task.name, code_file=call.task.code_file,
                      inputs=dict(call.inputs), log_path=str(ref.log_path),
                      checkpoint_uri=contract.checkpoint_uri(engine.store, engine.lineage,
                                                             ref.action),
                      run_start=engine.started_at, custom_context=dict(call.custom_context))
        try:
            done = await asyncio.wait_for(self._within_memory(worker, order),
                                          call.task.timeout)
        except OutOfMemory as oom:
            await worker.kill()
            return self._failed("oom", str(oom), worker, signal="SIGKILL")
        except asyncio.TimeoutError:
            await worker.kill(KILL_GRACE)
            return self._failed("timeout", f"ran past its timeout of {call.task.timeout:g}s; "
                                "its process tree was killed", worker)
        except WorkerDied as died:
            if worker.box is not None and (await worker.box.exit()).oom:
                return self._failed("oom", self._oom_message(), worker, signal="SIGKILL")
            code, sig = procs.describe_exit(died.returncode)
            return self._failed("crash", died.why, worker, exit_code=code, signal=sig)
        except asyncio.CancelledError:
            await worker.kill(KILL_GRACE)
            self._rescue_output(worker)
            raise
        if done.failure is not None:
            if done.failure.origin_action:  # it carries the log of the call that failed
                return AttemptOutcome(failure=done.failure)
            return AttemptOutcome(failure=replace(done.failure, log_tail=log_tail(ref.log_path)))
        return AttemptOutcome(output=done.output)

    async def _within_memory(self, worker: Worker, order: m.Run) -> m.Done:
        """The worker's answer to ``order``; `OutOfMemory` once its process tree holds more than
        the environment's memory limit, as a container past its cgroup limit is OOM-killed.
        Meanwhile the tree's CPU and memory are written as the call's system metrics."""
        resources = self.call.task.env.resources
        limit = resources.memory_limit_bytes if resources is not None else None
        if worker.box is not None:  # the kernel holds a container to its limit
            limit = None
        interval = self.engine.system_interval()
        answer = worker.order(order)
        if limit is None and not interval:
            return await answer
        started = time.monotonic()
        done, _ = await asyncio.wait({answer}, timeout=min(WATCH_AFTER_SECONDS, interval or 1.0))
        if done:
            return answer.result()
        system = None if not interval else CallSampler(
            open_writer(self.engine.home, order.run, order.action, order.attempt,
                        source="system"),
            interval, started=started)
        tick = MEMORY_SAMPLE_SECONDS if limit is not None or system is None \
            else system.interval
        primed: int | None = None
        try:
            while True:
                # A container's processes are outside this process's tree: its PID 1's tree,
                # sampled once podman said which pid that is.
                pid = worker.pid if worker.box is None else worker.box.known_pid()
                if system is not None and pid is not None and pid != primed:
                    await asyncio.to_thread(system.prime, pid)
                    primed = pid
                done, _ = await asyncio.wait({answer}, timeout=tick)
                if done:
                    return answer.result()
                if limit is not None:
                    used = await asyncio.to_thread(procs.tree_memory, worker.pid)
                    if used > limit:
                        raise OutOfMemory(
                            f"its processes held {used / 2**20:.0f} MiB, over its memory limit "
                            f"of {limit / 2**20:.0f} MiB; they were killed "
                            "(raise Resources(memory=...) or use less)")
                if system is not None and primed is not None and system.due():
                    await asyncio.to_thread(system.sample, primed)
        finally:
            if system is not None:
                system.close()

    def _oom_message(self) -> str:
        resources = self.call.task.env.resources
        limit = resources.memory_limit_bytes if resources is not None else None
        size = f" of {limit / 2**20:.0f} MiB" if limit else ""
        return (f"the kernel killed it at its container's memory limit{size} (raise "
                "Resources(memory=...) or use less)")

    def _rescue_output(self, worker: Worker) -> None:
        """What the call printed before its worker died, still in the worker's spool, moved to
        the call's log (`log_files.rescue_spool`)."""
        rescue_spool(spool_path(self.ref.log_path.parent, worker.worker_id), self.ref.log_path)

    def _failed(self, kind: str, message: str, worker: Worker, exit_code: int | None = None,
                signal: str | None = None) -> AttemptOutcome:
        call, ref = self.call, self.ref
        self._rescue_output(worker)
        tail = log_tail(ref.log_path) or log_tail(worker.log_path)
        return AttemptOutcome(failure=FailureInfo(
            task=call.task.name, action=ref.action, attempt=ref.attempt, kind=kind,
            message=message, exit_code=exit_code, signal=signal, log_tail=tail))
