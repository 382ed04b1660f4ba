"""The worker's side of the controller socket: one I/O thread, usable from any thread.

A task body runs on the worker's main thread (sync tasks block it, async tasks run on its own
event loop), so the socket lives on a separate thread with its own loop: a task blocked on a
child call never stops the worker from hearing the answer.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import os
import queue
import signal
import threading
from typing import Any

from shoal._runtime import messages as m
from shoal._spec.call import CallSpec
from shoal._spec.trace import TraceCall, TraceOutcome


class ControllerClient:
    """Connects to the controller, receives `Run` orders and sends calls and results."""

    def __init__(self, socket_path: str, worker_id: str) -> None:
        self.orders: queue.Queue[m.Run | None] = queue.Queue()
        self._pending: dict[int, concurrent.futures.Future[Any]] = {}
        self._ids = itertools.count(1)
        self._loop = asyncio.new_event_loop()
        self._ready = concurrent.futures.Future[None]()
        self._writer: asyncio.StreamWriter | None = None
        # Frames leave in the order they are encoded: a spec is named before it is referred to.
        self._specs = m.SpecSender()
        self._sending = threading.Lock()
        self._thread = threading.Thread(
            target=self._serve, args=(socket_path, worker_id), name="shoal-io", daemon=True
        )
        self._thread.start()
        self._ready.result(timeout=30)

    def _serve(self, socket_path: str, worker_id: str) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._main(socket_path, worker_id))

    async def _main(self, socket_path: str, worker_id: str) -> None:
        try:
            reader, self._writer = await asyncio.open_unix_connection(socket_path)
            self._writer.write(m.encode(m.Hello(worker_id, os.getpid())))
            await self._writer.drain()
        except BaseException as e:
            self._ready.set_exception(e)
            return
        self._ready.set_result(None)
        orphaned = True
        try:
            while True:
                msg = await m.read(reader)
                if isinstance(msg, m.Run):
                    self.orders.put(msg)
                elif isinstance(msg, m.Result):
                    fut = self._pending.pop(msg.request_id, None)
                    if fut is not None:
                        if msg.error is not None:
                            fut.set_exception(msg.error)
                        else:
                            fut.set_result(msg.output)
                elif isinstance(msg, m.Shutdown):
                    orphaned = False
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            if orphaned:
                # The controller died without a word (killed driver): nobody will ever read
                # what this worker computes, so end it and everything it started now rather
                # than let a training loop run on unwatched.
                os.killpg(os.getpgrp(), signal.SIGKILL)
            for fut in self._pending.values():
                fut.set_exception(ConnectionError("the controller closed the connection"))
            self.orders.put(None)

    def _send(self, message: object) -> None:
        with self._sending:
            data = (m.encode_submit(message, self._specs) if isinstance(message, m.Submit)
                    else m.encode(message))
            self._loop.call_soon_threadsafe(self._write, data)

    def _write(self, data: bytes) -> None:
        assert self._writer is not None  # set before _ready resolves
        self._writer.write(data)

    def submit(self, call: CallSpec) -> concurrent.futures.Future[Any]:
        """Ask the controller to run ``call``; the future holds the output literal."""
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        request_id = next(self._ids)
        self._pending[request_id] = fut
        self._send(m.Submit(request_id, call))
        return fut

    def trace_start(self, trace: TraceCall) -> concurrent.futures.Future[Any]:
        """Record a traced call as started; the future holds a `TraceReplay` or None."""
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        request_id = next(self._ids)
        self._pending[request_id] = fut
        self._send(m.TraceStart(request_id, trace))
        return fut

    def trace_end(self, outcome: TraceOutcome) -> None:
        self._send(m.TraceEnd(outcome))

    def done(self, message: m.Done) -> None:
        self._send(message)
