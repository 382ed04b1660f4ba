"""`shoal.map(task, *iterables)`: one task call per item, results in input order (Flyte 2's
``flyte.map``); ``shoal.map.aio(...)`` is the same as an async iterator.

Inside a running task every item is a task call submitted to the controller, at most
``concurrency`` of them in flight (0: no bound) and the next submitted as soon as one ends, so
a slow item at the head never idles the other slots. Items are read from the iterables lazily:
a map of a million items holds no more than the calls in flight and the results not yet taken.
Outside any run each item calls the plain function in turn, as calling a task there does.

With ``return_exceptions=True`` (Flyte's default) a failed call yields its exception in its
place. Otherwise the first failure, in input order, is raised when its turn comes; once any
call has failed no further call is started, and calls already in flight finish on their own
(they are the calling task's children: they end with it).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import functools
import inspect
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from shoal._api.group import group
from shoal._runtime.context import current
from shoal.errors import InputError, SpecError

if TYPE_CHECKING:
    from shoal._api.task import TaskTemplate

_EXAMPLE = "e.g. shoal.map(square, range(10), concurrency=8)"


class _Mapped:
    """What map calls: a task, or a ``functools.partial`` of one with some inputs fixed."""

    def __init__(self, target: object, iterables: int, group_name: str | None,
                 concurrency: object) -> None:
        from shoal._api.task import TaskTemplate

        func, args, kwargs = target, (), {}
        if isinstance(target, functools.partial):
            func, args, kwargs = target.func, target.args, dict(target.keywords or {})
        if not isinstance(func, TaskTemplate):
            raise SpecError("map(task)", target, "must be a task (or a functools.partial of one)",
                            f"decorate the function with @env.task; {_EXAMPLE}")
        self.task: TaskTemplate[Any] = func
        self.args: tuple[Any, ...] = args
        self.kwargs: dict[str, Any] = kwargs
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 0:
            raise SpecError("map(concurrency)", concurrency,
                            "must be an int >= 0 (0: no bound on the calls in flight)", _EXAMPLE)
        self.concurrency = concurrency
        if group_name is not None and (not isinstance(group_name, str) or not group_name.strip()):
            raise SpecError("map(group_name)", group_name, "must be a non-empty string or None",
                            'e.g. group_name="shards"')
        # Flyte names the group of every map "<task>_<group_name or 'map'>"; a name the user
        # gave is kept as given, so `shoal runs` shows what the program says.
        self.group = group_name or f"{func.short_name}_map"
        try:
            if iterables:  # no iterables: nothing to call (as Flyte), whatever the signature
                func.signature.bind(*args, *(None,) * iterables, **kwargs)
        except TypeError as e:
            # A TypeError, as Python's own for a call whose arguments do not bind (Flyte's
            # examples catch it for a partial whose keywords precede the mapped parameter).
            raise InputError(f"map({func.name})", f"{len(args)} fixed + {iterables} mapped "
                            f"positional input(s), keywords {sorted(kwargs)}", str(e),
                            f"pass one iterable per remaining parameter of "
                            f"{func.short_name}{func.signature}") from e

    def submit(self, item: tuple[Any, ...]) -> concurrent.futures.Future[Any]:
        """Submit one call to the controller; the future holds the output literal."""
        c = current()
        task = self.task
        task._refuse_from_gang(c)
        task._check_reachable(c.env)
        assert c.client is not None  # only called inside a run
        with group(self.group):  # the group is read when the call is made
            call = task.make_call((*self.args, *item), self.kwargs, c.action)
        return c.client.submit(call)

    def call_plain(self, item: tuple[Any, ...]) -> Any:
        with group(self.group):
            return self.task(*self.args, *item, **self.kwargs)


class _Window:
    """The calls of one map in flight, in input order, with how many are still running."""

    def __init__(self, mapped: _Mapped, items: Iterator[tuple[Any, ...]],
                 return_exceptions: bool, on_settled: Callable[[], None]) -> None:
        self.mapped = mapped
        self.items = items
        self.return_exceptions = return_exceptions
        self.on_settled = on_settled
        self.pending: collections.deque[concurrent.futures.Future[Any]] = collections.deque()
        self.running = 0
        self.failed = False
        self.exhausted = False
        self.lock = threading.Lock()

    def top_up(self) -> None:
        """Submit items until ``concurrency`` calls run (or the items or the will run out)."""
        limit = self.mapped.concurrency
        while not self.exhausted and not (self.failed and not self.return_exceptions):
            with self.lock:
                if limit and self.running >= limit:
                    return
                self.running += 1
            try:
                item = next(self.items)
            except StopIteration:
                with self.lock:
                    self.running -= 1
                self.exhausted = True
                return
            try:
                fut = self.mapped.submit(item)
            except BaseException:  # a bad input fails at the call site, as a task call does
                with self.lock:
                    self.running -= 1
                raise
            self.pending.append(fut)
            fut.add_done_callback(self._settled)

    def _settled(self, fut: concurrent.futures.Future[Any]) -> None:
        with self.lock:
            self.running -= 1
            if fut.exception() is not None:
                self.failed = True
        self.on_settled()

    def take(self) -> Any:
        """The head's value (or exception); the head must be done."""
        fut = self.pending.popleft()
        error = fut.exception()
        if error is None:
            # Decoded here, on the caller's thread, not on the client's I/O thread.
            try:
                return self.mapped.task.decode_output(fut.result())
            except Exception as e:
                error = e
        if self.return_exceptions:
            return error
        self.exhausted = True
        raise error


def _run_coroutine(value: Any) -> Any:
    """The result of a plain async task function called from sync code outside a run."""
    if not inspect.isawaitable(value):
        return value
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_await(value))
    # Called from a running event loop: run the coroutine on a loop of its own.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, _await(value)).result()


async def _await(value: Any) -> Any:
    return await value


class _Mapper:
    """``shoal.map``: call it for a sync iterator; ``shoal.map.aio`` for an async one."""

    def __call__(self, task: Any, *iterables: Iterable[Any], group_name: str | None = None,
                 concurrency: int = 0, return_exceptions: bool = True) -> Iterator[Any]:
        mapped = _Mapped(task, len(iterables), group_name, concurrency)
        return self._sync(mapped, iterables, bool(return_exceptions))

    def _sync(self, mapped: _Mapped, iterables: tuple[Iterable[Any], ...],
              return_exceptions: bool) -> Iterator[Any]:
        if not iterables:
            return
        items = zip(*iterables, strict=False)  # as zip and Flyte: the shortest ends it
        mapped.task._refuse_from_gang(current())
        if current().client is None:
            for item in items:
                try:
                    yield _run_coroutine(mapped.call_plain(item))
                except Exception as e:
                    if not return_exceptions:
                        raise
                    yield e
            return
        wake = threading.Condition()

        def settled() -> None:
            with wake:
                wake.notify_all()

        window = _Window(mapped, items, return_exceptions, settled)
        while True:
            window.top_up()
            if not window.pending:
                return
            head = window.pending[0]
            with wake:
                while not head.done() and not _room(window):
                    wake.wait()
            if head.done():
                yield window.take()

    def aio(self, task: Any, *iterables: Iterable[Any], group_name: str | None = None,
            concurrency: int = 0, return_exceptions: bool = True) -> AsyncIterator[Any]:
        """As ``shoal.map``, as an async iterator: ``async for r in shoal.map.aio(t, xs):``."""
        mapped = _Mapped(task, len(iterables), group_name, concurrency)
        return self._async(mapped, iterables, bool(return_exceptions))

    async def _async(self, mapped: _Mapped, iterables: tuple[Iterable[Any], ...],
                     return_exceptions: bool) -> AsyncIterator[Any]:
        if not iterables:
            return
        items = zip(*iterables, strict=False)  # as zip and Flyte: the shortest ends it
        mapped.task._refuse_from_gang(current())
        if current().client is None:
            for item in items:
                try:
                    with group(mapped.group):
                        value = await mapped.task.aio(*mapped.args, *item, **mapped.kwargs)
                except Exception as e:
                    if not return_exceptions:
                        raise
                    value = e
                yield value
            return
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()

        def settled() -> None:  # on the client's I/O thread
            # The loop may be gone: a consumer that stopped iterating and ended its loop.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(wake.set)

        window = _Window(mapped, items, return_exceptions, settled)
        while True:
            window.top_up()
            if not window.pending:
                return
            head = window.pending[0]
            while not head.done() and not _room(window):
                wake.clear()
                if head.done() or _room(window):
                    break
                await wake.wait()
            if head.done():
                yield window.take()

    def __repr__(self) -> str:
        return "shoal.map"


def _room(window: _Window) -> bool:
    """Whether another call may start now."""
    if window.exhausted or (window.failed and not window.return_exceptions):
        return False
    limit = window.mapped.concurrency
    return not limit or window.running < limit


map = _Mapper()
