"""`@shoal.trace` on generator functions, sync and async: one traced call whose output is the
list of the items it yielded (`shoal._api.trace_calls` names, records and replays the call).

The call starts when its first item is asked for, as in Flyte, so a generator made but never
iterated records nothing. Each item reaches the caller as soon as it is yielded; the list is
recorded once the generator is exhausted. The body runs in the trace's scope one step at a
time (entered before each step, left after it), so between two items the caller is in its own
scope: traced calls it makes meanwhile are the generator's siblings, not its children.

A sync generator the caller leaves (``break``) is closed, and recorded as stopped, at once;
an async one when asyncio finalizes it, which may be after its task returned: wrap the loop in
``contextlib.aclosing(...)`` to have it recorded at the ``break``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import time
import warnings
from collections.abc import AsyncGenerator, Callable, Generator
from dataclasses import dataclass
from typing import Any

from shoal._api.trace_calls import Traced, TracedCall, recording_scope
from shoal.errors import SpecError


@dataclass(frozen=True)
class _End:
    """The generator is exhausted; ``value`` is what it returned."""

    value: Any = None


def _next_or_end(step: Callable[..., Any], arg: tuple[Any, ...]) -> Any:
    try:
        return step(*arg)
    except StopIteration as stop:
        return _End(stop.value)


async def _anext_or_end(step: Callable[..., Any], arg: tuple[Any, ...]) -> Any:
    try:
        return await step(*arg)
    except StopAsyncIteration:
        return _End()


class _Steps:
    """One traced run of a generator: advance it in the trace's scope, record how it ended."""

    def __init__(self, call: TracedCall) -> None:
        self.call = call
        self.t0 = time.monotonic()
        self.items: list[Any] = []

    def advance(self, step: Callable[..., Any], arg: tuple[Any, ...]) -> tuple[bool, Any]:
        """(True, the next item), or (False, None) once the generator is exhausted."""
        try:
            with self.call.body():
                item = _next_or_end(step, arg)
        except Exception as e:
            self.call.finish(self.t0, error=e)
            raise
        except BaseException as e:  # KeyboardInterrupt, a cancelled task: stopped, not failed
            self.call.stopped(self.t0, self.why_stopped(e))
            raise
        return self._took(item)

    async def aadvance(self, step: Callable[..., Any], arg: tuple[Any, ...]) -> tuple[bool, Any]:
        try:
            with self.call.body():
                item = await _anext_or_end(step, arg)
        except Exception as e:
            self.call.finish(self.t0, error=e)
            raise
        except BaseException as e:
            self.call.stopped(self.t0, self.why_stopped(e))
            raise
        return self._took(item)

    def _took(self, item: Any) -> tuple[bool, Any]:
        if not isinstance(item, _End):
            self.items.append(item)
            return True, item
        if item.value is not None:
            warnings.warn(f"traced generator {self.call.traced.name!r} returned "
                          f"{item.value!r}: only the items it yields are recorded, so its "
                          "return value is dropped (a replay could not give it back)",
                          stacklevel=4)
        self.call.finish(self.t0, self.items)
        return False, None

    def why_stopped(self, stop: BaseException) -> str:
        by = ("its caller stopped iterating" if isinstance(stop, GeneratorExit)
              else f"{type(stop).__name__} stopped it")
        return f"{by} after {len(self.items)} item(s): not replayed"

    def close(self, gen: Generator[Any, Any, Any], why: str) -> None:
        try:
            with self.call.body():  # its finally blocks run in the trace's scope
                gen.close()
        finally:
            self.call.stopped(self.t0, why)

    async def aclose(self, gen: AsyncGenerator[Any, Any], why: str) -> None:
        try:
            with self.call.body():
                await gen.aclose()
        finally:
            self.call.stopped(self.t0, why)


def _refuse_sent(traced: Traced, sent: Any) -> SpecError:
    return SpecError(f"traced generator {traced.name!r}", sent,
                     "cannot be sent values: a replay yields its recorded items and could not "
                     "pass them on", "iterate it (for / async for) and pass what it needs as "
                     "arguments")


def _run_sync(traced: Traced, call: TracedCall, args: tuple[Any, ...],
              kwargs: dict[str, Any]) -> Generator[Any, Any, None]:
    steps = _Steps(call)
    gen = traced.func(*args, **kwargs)
    step: Callable[..., Any] = gen.__next__
    arg: tuple[Any, ...] = ()
    while True:
        more, item = steps.advance(step, arg)
        if not more:
            return
        try:
            sent = yield item
        except Exception as e:  # thrown in by the caller: the generator may handle it
            step, arg = gen.throw, (e,)
            continue
        except BaseException as e:  # GeneratorExit: the caller stopped iterating
            steps.close(gen, steps.why_stopped(e))
            raise
        if sent is not None:
            steps.close(gen, "a value was sent into it: not replayed")
            raise _refuse_sent(traced, sent)
        step, arg = gen.__next__, ()


def _sync(traced: Traced) -> Callable[..., Generator[Any, Any, None]]:
    func = traced.func

    @functools.wraps(func)
    def traced_generator(*args: Any, **kwargs: Any) -> Generator[Any, Any, None]:
        scope = recording_scope(traced)
        if scope is None:
            yield from func(*args, **kwargs)
            return
        call = TracedCall(traced, scope, args, kwargs)
        assert call.client is not None
        done, items = call.replayed(call.client.trace_start(call.call).result())
        if not done:
            yield from _run_sync(traced, call, args, kwargs)
            return
        for item in items:
            if (sent := (yield item)) is not None:
                raise _refuse_sent(traced, sent)

    return traced_generator


def _async(traced: Traced) -> Callable[..., AsyncGenerator[Any, Any]]:
    func = traced.func

    @functools.wraps(func)
    async def traced_async_generator(*args: Any, **kwargs: Any) -> AsyncGenerator[Any, Any]:
        scope = recording_scope(traced)
        if scope is None:
            async with contextlib.aclosing(func(*args, **kwargs)) as untraced:
                async for item in untraced:
                    yield item
            return
        call = TracedCall(traced, scope, args, kwargs)
        assert call.client is not None
        done, items = call.replayed(await asyncio.wrap_future(call.client.trace_start(call.call)))
        if done:
            for item in items:
                if (sent := (yield item)) is not None:
                    raise _refuse_sent(traced, sent)
            return
        # An async generator cannot delegate with `yield from`: the loop of `_run_sync`, inline.
        steps = _Steps(call)
        gen = func(*args, **kwargs)
        step: Callable[..., Any] = gen.__anext__
        arg: tuple[Any, ...] = ()
        while True:
            more, item = await steps.aadvance(step, arg)
            if not more:
                return
            try:
                sent = yield item
            except Exception as e:
                step, arg = gen.athrow, (e,)
                continue
            except BaseException as e:
                await steps.aclose(gen, steps.why_stopped(e))
                raise
            if sent is not None:
                await steps.aclose(gen, "a value was sent into it: not replayed")
                raise _refuse_sent(traced, sent)
            step, arg = gen.__anext__, ()

    return traced_async_generator


def wrap(traced: Traced) -> Callable[..., Any]:
    """The traced twin of a generator function: itself a generator function of the same kind."""
    return _async(traced) if inspect.isasyncgenfunction(traced.func) else _sync(traced)
