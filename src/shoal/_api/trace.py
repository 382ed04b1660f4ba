"""`@shoal.trace`: record each call of a plain function made inside a task, as Flyte 2's
``flyte.trace``, so a retry of the task or a resumed run does not run it again.

Inside a task, every call of a traced function becomes an action of kind "trace", a child of
the calling action, named ``<parent>.t<n>`` (the n-th traced call of that action's current
attempt, counted in the order calls start), with its inputs, output, duration and error. When
a call of the same name, function and inputs succeeded before (an earlier attempt of this
task, or the run a ``shoal run --resume`` continues), its recorded output is returned and the
function does not run. Outside a task the function just runs.

Values are encoded with the task codecs, driven by the function's type hints. Traced values
stay inside the task that made them (only its own later attempts read them back), so what the
codecs cannot encode natively -- a parameter or return without a hint, ``Any``, a class Shoal
cannot look into -- is pickled, as Flyte does; a value that cannot even be pickled is refused
with an error naming the parameter. Task calls made inside a traced function run as plain
Python in this process, as in Flyte: the trace is one recorded step. A call that raised is
recorded as failed and runs again on the retry (Flyte replays the error). Ranks of a clustered
task (and a task's pod on Kubernetes) have no controller to record to: there a traced function
runs untraced, with one warning per process.

A generator function (sync or async) is traced as one call too: it starts when its first item
is asked for, its items reach the caller as they are yielded, and it completes when it is
exhausted; then its items are recorded, as a list, and a replay yields them again without
running it (as Flyte records a traced generator). A generator that raised, or that its caller
stopped iterating early, is recorded (failed, cancelled) but never replayed: its items are not
the whole answer. Its return hint names the items: ``Iterator[int]``, ``Generator[int, None,
None]``, ``AsyncIterator[int]``. Values sent into it are refused; its return value is not kept.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import time
import typing
from collections.abc import Callable
from typing import Any, TypeVar

from shoal._api import trace_generators
from shoal._api.trace_calls import Scope, Traced, TracedCall, recording_scope

F = TypeVar("F", bound=Callable[..., Any])


def _run_sync(traced: Traced, scope: Scope, args: tuple[Any, ...],
              kwargs: dict[str, Any]) -> Any:
    call = TracedCall(traced, scope, args, kwargs)
    assert call.client is not None
    done, value = call.replayed(call.client.trace_start(call.call).result())
    if done:
        return value
    t0 = time.monotonic()
    context = contextvars.copy_context()  # the body's scope must not leak to the caller
    try:
        value = context.run(_in_body, call, traced.func, args, kwargs)
    except Exception as e:
        call.finish(t0, error=e)
        raise
    return call.finish(t0, value)


def _in_body(call: TracedCall, func: Callable[..., Any], args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> Any:
    with call.body():
        return func(*args, **kwargs)


async def _run_async(traced: Traced, scope: Scope, args: tuple[Any, ...],
                     kwargs: dict[str, Any]) -> Any:
    import asyncio

    call = TracedCall(traced, scope, args, kwargs)
    assert call.client is not None
    reply = await asyncio.wrap_future(call.client.trace_start(call.call))
    done, value = call.replayed(reply)
    if done:
        return value
    t0 = time.monotonic()
    # A task of its own gets a copy of the context: the body's scope stays inside it.
    body = asyncio.ensure_future(_await_in_body(call, traced.func, args, kwargs))
    try:
        value = await body
    except Exception as e:
        call.finish(t0, error=e)
        raise
    return call.finish(t0, value)


async def _await_in_body(call: TracedCall, func: Callable[..., Any], args: tuple[Any, ...],
                         kwargs: dict[str, Any]) -> Any:
    with call.body():
        return await func(*args, **kwargs)


def trace(func: F) -> F:
    """Record every call of ``func`` made inside a task; replay it on retries and resumes."""
    traced = Traced(func)
    if traced.generator:
        return typing.cast(F, trace_generators.wrap(traced))
    if inspect.iscoroutinefunction(func):
        @functools.wraps(func)
        async def traced_async(*args: Any, **kwargs: Any) -> Any:
            scope = recording_scope(traced)
            if scope is None:
                return await func(*args, **kwargs)
            return await _run_async(traced, scope, args, kwargs)

        return typing.cast(F, traced_async)

    @functools.wraps(func)
    def traced_sync(*args: Any, **kwargs: Any) -> Any:
        scope = recording_scope(traced)
        if scope is None:
            return func(*args, **kwargs)
        return _run_sync(traced, scope, args, kwargs)

    return typing.cast(F, traced_sync)
