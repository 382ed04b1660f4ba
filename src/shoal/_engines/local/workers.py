"""Warm worker processes of the local engine, one set per environment and process environment.

A worker is started once and then runs call after call (an interpreter start and the user's
imports cost far more than a call), one call at a time. The engine keeps one Unix socket; each
worker connects to it and introduces itself, and from then on the worker's connection carries
its orders, its results and the calls its tasks make.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shoal._engines.local import procs
from shoal._engines.local.containers import Container
from shoal._engines.local.templates import WorkerTemplate
from shoal._runtime import messages as m
from shoal._runtime.log_files import log_tail
from shoal._spec.call import ReuseSpec
from shoal.errors import EngineError


class WorkerDied(Exception):
    """The worker of a call is gone: it exited (``returncode``), or the engine ended it
    because its connection carried something unreadable (``why``)."""

    def __init__(self, returncode: int | None, why: str = "its process died") -> None:
        self.returncode, self.why = returncode, why
        super().__init__(f"worker exited with {returncode}: {why}")


class WorkerStartFailed(EngineError):
    """A worker that exited, or never connected, before it could take its first call."""

    def __init__(self, message: str, returncode: int | None, log_tail: str) -> None:
        super().__init__(f"{message}; its log:\n{log_tail}")
        self.why, self.returncode, self.log_tail = message, returncode, log_tail


@dataclass(eq=False)
class Worker:
    worker_id: str
    env: str  # its key (`plan.worker_key`): the environment and the variables it started with
    proc: procs.Proc
    log_path: Path
    writer: asyncio.StreamWriter | None = None
    current: asyncio.Future[m.Done] | None = None
    healthy: bool = True
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)
    idle_timer: asyncio.TimerHandle | None = None  # ends it after its ReusePolicy.idle_ttl
    box: Container | None = None  # the container it runs in (`--containers`), ended by name

    @property
    def pid(self) -> int:
        return self.proc.pid

    def send(self, message: object) -> None:
        if self.writer is None or self.writer.is_closing():
            raise EngineError(f"worker {self.worker_id} is not connected")
        self.writer.write(m.encode(message))

    def order(self, run: m.Run) -> asyncio.Future[m.Done]:
        self.current = asyncio.get_running_loop().create_future()
        self.send(run)
        return self.current

    async def kill(self, grace: float = 0.0) -> None:
        self.healthy = False
        if self.box is not None:
            await self.box.stop(grace)
            return
        await procs.kill_tree(self.proc.pid, grace)
        # Reap it while the loop runs: a child reaped after the loop closed makes asyncio log
        # "Loop ... that handles pid ... is closed" when a cancelled run ends.
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.proc.wait(), 1.0)

    async def end(self, grace: float) -> None:
        """End a worker that was sent `Shutdown`: given ``grace`` seconds to exit by itself
        (an idle one does at once), then killed as `kill` does; what it started dies too."""
        if self.box is not None or self.proc.returncode is not None:
            await self.kill(grace)
            return
        family = [p.pid for p in procs.descendants(self.pid)]
        try:
            await asyncio.wait_for(asyncio.shield(self.proc.wait()), grace)
        except asyncio.TimeoutError:
            await self.kill(grace)
        self.healthy = False
        await procs.kill_left(family, grace)  # no longer in its tree once it exited


# Idle workers are kept for this many process environments of one environment at most:
# `task.override(env_vars=...)` with a new value per call would otherwise leave a worker per call.
KEYS_KEPT_PER_ENV = 4

# Called with (worker, message) when a task on that worker calls another task (Submit) or a
# traced function (TraceStart, TraceEnd).
SubmitHandler = Callable[[Worker, m.Submit | m.TraceStart | m.TraceEnd], None]


class WorkerSet:
    """All workers of one engine: spawn, hand out, take back, end."""

    def __init__(self, socket_path: str, on_submit: SubmitHandler) -> None:
        self.socket_path = socket_path
        self.on_submit = on_submit
        self._ids = itertools.count()
        self._idle: dict[str, list[Worker]] = {}
        self._all: dict[str, Worker] = {}
        self._hello: dict[str, asyncio.Future[tuple[asyncio.StreamReader,
                                                    asyncio.StreamWriter]]] = {}
        self._server: asyncio.AbstractServer | None = None
        # Processes that call tasks without being workers (a Ray gang's driver), by id.
        self._callers: dict[str, Worker] = {}
        self._closing = False

    async def start(self) -> None:
        self._server = await asyncio.start_unix_server(self._connected, path=self.socket_path)

    async def _connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            hello = await m.read(reader)
        except Exception:  # gone, or not one of ours (a frame that does not unpickle)
            writer.close()
            return
        if isinstance(hello, m.Hello) and hello.worker_id in self._callers:
            caller = self._callers[hello.worker_id]
            _close_writer(caller)  # an earlier start's driver of the same gang, gone
            caller.writer = writer
            caller.tasks.append(asyncio.ensure_future(self._listen(caller, reader)))
            return
        if not isinstance(hello, m.Hello) or hello.worker_id not in self._hello:
            writer.close()
            return
        self._hello.pop(hello.worker_id).set_result((reader, writer))

    def expect_caller(self, caller_id: str, proc: asyncio.subprocess.Process,
                      log_path: Path) -> None:
        """Serve the calls of a process that is not a worker but may call tasks: the
        driver of a Ray gang (in ``proc``'s tree), which connects as ``caller_id``."""
        if caller_id not in self._callers:
            self._callers[caller_id] = Worker(caller_id, "caller", proc, log_path)

    def forget_caller(self, caller_id: str) -> None:
        caller = self._callers.pop(caller_id, None)
        if caller is not None:
            for task in caller.tasks:
                task.cancel()
            _close_writer(caller)

    @property
    def closing(self) -> bool:
        return self._closing

    def new_id(self, env: str) -> str:
        return f"{env}-w{next(self._ids)}"

    async def spawn(self, env: str, worker_id: str, argv: tuple[str, ...],
                    environ: dict[str, str], log_path: Path, timeout: float = 120.0,
                    box: Container | None = None,
                    template: WorkerTemplate | None = None) -> Worker:
        """Start a worker and wait for it to connect; ``box``: the container ``argv``
        starts it in; ``template``: forked from it when it can (else started afresh)."""
        hello = asyncio.get_running_loop().create_future()
        self._hello[worker_id] = hello  # before it starts: a forked one says hello at once
        proc: procs.Proc | None = None
        if template is not None and box is None and template.can_fork(argv, environ):
            proc = await template.fork(worker_id, environ, log_path)
        if proc is None and not self._closing:
            started = await procs.spawn(argv, environ, log_path,
                                        cwd=None if box is None else str(box.folder))
            if box is not None:
                box.attach(started)
            proc = started
        if self._closing:  # `close` ended the workers it knew of while this one started
            self._hello.pop(worker_id, None)
            if proc is not None:
                await procs.kill_tree(proc.pid)
            raise EngineError(f"worker {worker_id} was not started: the engine is closing")
        assert proc is not None
        worker = Worker(worker_id, env, proc, log_path, box=box)
        self._all[worker_id] = worker
        exited = asyncio.ensure_future(proc.wait())
        done, _ = await asyncio.wait({hello, exited}, timeout=timeout,
                                     return_when=asyncio.FIRST_COMPLETED)
        if hello not in done:
            self._hello.pop(worker_id, None)
            hello.cancel()
            await worker.kill()
            self._all.pop(worker_id, None)
            why = "exited" if exited in done else f"did not connect within {timeout:g}s"
            raise WorkerStartFailed(f"worker {worker_id} for environment "
                                    f"{env.split('#')[0]!r} {why}",
                                    exited.result() if exited in done else None,
                                    log_tail(log_path))
        reader, worker.writer = hello.result()
        if box is not None:
            box.started()
        worker.tasks.append(asyncio.ensure_future(self._listen(worker, reader)))
        worker.tasks.append(asyncio.ensure_future(self._watch(worker, exited)))
        return worker

    async def _listen(self, worker: Worker, reader: asyncio.StreamReader) -> None:
        specs = m.SpecReceiver()  # the task specs this connection named
        try:
            while True:
                msg = await m.read(reader, specs)
                if isinstance(msg, m.Done):
                    if worker.current is not None and not worker.current.done():
                        worker.current.set_result(msg)
                elif isinstance(msg, m.Submit | m.TraceStart | m.TraceEnd):
                    self.on_submit(worker, msg)
        except (asyncio.IncompleteReadError, ConnectionError):
            return  # the process is gone; _watch reports it
        except Exception as e:
            # Nothing after an unreadable frame can be trusted: end the worker, and fail its
            # call with the reason rather than leave the call waiting for an answer.
            why = (f"its worker sent a message the engine could not read "
                   f"({type(e).__name__}: {e}); the worker was ended")
            worker.healthy = False
            if worker.current is not None and not worker.current.done():
                worker.current.set_exception(WorkerDied(None, why))
            _close_writer(worker)
            await worker.kill()

    async def _watch(self, worker: Worker, exited: asyncio.Future[int]) -> None:
        code = await exited
        worker.healthy = False
        if worker.current is not None and not worker.current.done():
            # Let the last Done that may be in flight arrive before calling it a crash.
            await asyncio.sleep(0.05)
            if not worker.current.done():
                worker.current.set_exception(WorkerDied(code))
        self._all.pop(worker.worker_id, None)
        _close_writer(worker)

    def take_idle(self, env: str) -> Worker | None:
        idle = self._idle.get(env, [])
        while idle:
            w = idle.pop()
            if w.idle_timer is not None:
                w.idle_timer.cancel()
                w.idle_timer = None
            if w.healthy and w.proc.returncode is None:
                return w
        return None

    def give_back(self, worker: Worker, reuse: ReuseSpec | None = None) -> None:
        """Keep ``worker`` warm for the next call of its environment, within ``reuse``: at most
        ``max_workers`` live workers of the environment, each ended ``idle_ttl`` s after its
        last call."""
        worker.current = None
        if not (worker.healthy and worker.proc.returncode is None):
            return
        env_name = worker.env.split("#")[0]
        if reuse is not None:
            live = sum(1 for w in self._all.values()
                       if w.healthy and w.env.split("#")[0] == env_name)
            if live > reuse.max_workers:
                self._end(worker)
                return
            worker.idle_timer = asyncio.get_running_loop().call_later(
                reuse.idle_ttl, self._expire, worker)
        self._idle.setdefault(worker.env, []).append(worker)
        self._idle[worker.env] = self._idle.pop(worker.env)  # the most recently used last
        self._trim(env_name)

    def _expire(self, worker: Worker) -> None:
        worker.idle_timer = None
        idle = self._idle.get(worker.env, [])
        if worker in idle:
            idle.remove(worker)
            self._end(worker)

    def _end(self, worker: Worker) -> None:
        worker.healthy = False
        with contextlib.suppress(EngineError, ConnectionError):
            worker.send(m.Shutdown())  # it exits on its own; _watch forgets it

    def _trim(self, env_name: str) -> None:
        """End the idle workers of the least recently used process environments of
        ``env_name`` beyond `KEYS_KEPT_PER_ENV`."""
        keys = [k for k, idle in self._idle.items() if idle and k.split("#")[0] == env_name]
        for key in keys[:-KEYS_KEPT_PER_ENV]:
            for w in self._idle.pop(key):
                self._end(w)

    def idle_count(self, env: str) -> int:
        return len(self._idle.get(env, []))

    async def close(self) -> None:
        self._closing = True
        for caller_id in list(self._callers):
            self.forget_caller(caller_id)
        for w in list(self._all.values()):
            with contextlib.suppress(EngineError, ConnectionError):
                w.send(m.Shutdown())
        ending = list(self._all.values())
        # Together: each takes as long as its process needs to exit, not a polling interval.
        await asyncio.gather(*(w.end(grace=0.5) for w in ending))
        for w in ending:
            for t in w.tasks:
                t.cancel()
            _close_writer(w)
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        self._all.clear()
        self._idle.clear()


def _close_writer(worker: Worker) -> None:
    """The engine's end of a worker's socket, closed with the worker (not left to the GC,
    which would close it after its event loop is gone)."""
    if worker.writer is not None and not worker.writer.is_closing():
        worker.writer.close()
