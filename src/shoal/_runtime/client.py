"""The worker's side of the controller socket: a reader thread, writes from any thread.

A task body runs on the worker's main thread (sync tasks block it, async tasks run on its own
event loop), so the socket is read on a separate thread: a task blocked on a child call never
stops the worker from hearing the answer. Writes need no thread: whoever sends (the main
thread with a call's result, a task's thread with a call it makes) writes its frame whole,
under a lock, on the blocking socket. A call of a fan-out costs the worker one wake-up for
its answer and none for its request.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import itertools
import os
import pickle
import queue
import signal
import socket
import threading
from typing import Any

from shoal._runtime import messages as m
from shoal._spec.call import CallSpec
from shoal._spec.trace import TraceCall, TraceOutcome


def _closed(fut: concurrent.futures.Future[Any]) -> None:
    """Fail ``fut`` for a closed connection, unless the reader thread or a sender did first."""
    with contextlib.suppress(concurrent.futures.InvalidStateError):
        fut.set_exception(ConnectionError("the controller closed the connection"))


class ControllerClient:
    """Connects to the controller, receives `Run` orders and sends calls and results."""

    def __init__(self, socket_path: str, worker_id: str) -> None:
        self.orders: queue.Queue[m.Run | None] = queue.Queue()
        self._pending: dict[int, concurrent.futures.Future[Any]] = {}
        self._ids = itertools.count(1)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(30)  # the connection only; reads and writes then block
        try:
            self._sock.connect(socket_path)
        except BaseException:
            self._sock.close()
            raise
        self._sock.settimeout(None)
        # Frames leave whole and in the order they are encoded: a spec is named before it is
        # referred to.
        self._specs = m.SpecSender()
        self._sending = threading.Lock()
        self._send(m.Hello(worker_id, os.getpid()))
        self._thread = threading.Thread(target=self._serve, name="shoal-io", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        orphaned = True
        try:
            with self._sock.makefile("rb") as frames:
                while True:
                    msg = m.read_frame(frames)
                    if msg is None:
                        break
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
        except (OSError, EOFError, pickle.UnpicklingError):
            pass
        finally:
            if orphaned:
                # The controller died without a word (killed driver): nobody will ever read
                # what this worker computes, so end it and everything it started now rather
                # than let a training loop run on unwatched.
                os.killpg(os.getpgrp(), signal.SIGKILL)
            for request_id in list(self._pending):
                fut = self._pending.pop(request_id, None)
                if fut is not None:
                    _closed(fut)
            self.orders.put(None)

    def _send(self, message: object) -> bool:
        """Write ``message`` whole; False when the controller is gone (its end is closed)."""
        with self._sending:
            data = (m.encode_submit(message, self._specs) if isinstance(message, m.Submit)
                    else m.encode(message))
            try:
                self._sock.sendall(data)
            except OSError:
                return False
        return True

    def _ask(self, message: m.Submit | m.TraceStart) -> concurrent.futures.Future[Any]:
        fut = self._pending[message.request_id]
        if not self._send(message):
            self._pending.pop(message.request_id, None)
            _closed(fut)
        return fut

    def _request_id(self) -> int:
        request_id = next(self._ids)
        self._pending[request_id] = concurrent.futures.Future()
        return request_id

    def submit(self, call: CallSpec) -> concurrent.futures.Future[Any]:
        """Ask the controller to run ``call``; the future holds the output literal."""
        return self._ask(m.Submit(self._request_id(), call))

    def trace_start(self, trace: TraceCall) -> concurrent.futures.Future[Any]:
        """Record a traced call as started; the future holds a `TraceReplay` or None."""
        return self._ask(m.TraceStart(self._request_id(), trace))

    def trace_end(self, outcome: TraceOutcome) -> None:
        self._send(m.TraceEnd(outcome))

    def done(self, message: m.Done) -> None:
        self._send(message)
