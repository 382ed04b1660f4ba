"""What `@shoal.trace` knows of a traced function and of one call of it inside a task: its
name, signature and hints (`Traced`), the task call it is recorded under (`recording_scope`),
and asking the controller, running and recording the call (`TracedCall`). `shoal._api.trace`
traces plain functions with these, `shoal._api.trace_generators` generator functions.
"""

from __future__ import annotations

import collections.abc
import contextlib
import contextvars
import dataclasses
import inspect
import threading
import time
import typing
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from shoal._api.group import current_group
from shoal._runtime.context import TaskContext, current, running
from shoal._spec.trace import TraceCall, TraceOutcome, TraceReplay
from shoal.errors import InputError, SpecError

_NO_HINT: Any = inspect.Parameter.empty
# What a generator function's return hint may say; its first argument is the items' type.
_ITERATORS = (collections.abc.Iterator, collections.abc.Iterable, collections.abc.Generator,
              collections.abc.AsyncIterator, collections.abc.AsyncIterable,
              collections.abc.AsyncGenerator)


@dataclasses.dataclass(frozen=True)
class Scope:
    """The task call a traced call belongs to, and the trace it is nested in (if any)."""

    task: TaskContext  # the task's context as the worker set it (with its client)
    parent: str  # the action new traced calls are children of
    group: tuple[str, ...] = ()  # the group path the parent was called in (shown above it)


_scope: contextvars.ContextVar[Scope | None] = contextvars.ContextVar("shoal_trace",
                                                                      default=None)
# How many traced calls each parent made in the current attempt. A worker runs one task call
# at a time and makes a new context for each, so the counts start over with a new context.
_counts: dict[str, int] = {}
_counted_for: list[TaskContext | None] = [None]
_counting = threading.Lock()  # `asyncio.to_thread` carries the context into other threads
_warned_in_gang: list[bool] = [False]


def _next_name(task: TaskContext, parent: str) -> str:
    with _counting:
        if _counted_for[0] is not task:
            _counted_for[0] = task
            _counts.clear()
        _counts[parent] = _counts.get(parent, 0) + 1
        return f"{parent}.t{_counts[parent]}"


class Traced:
    """What a traced function knows about itself: its name, signature and type hints."""

    def __init__(self, func: Callable[..., Any]) -> None:
        if not callable(func) or not hasattr(func, "__code__"):
            raise SpecError("@shoal.trace", func, "must decorate a function", "put it on a def")
        self.func = func
        self.name: str = func.__qualname__
        self.signature = inspect.signature(func)
        try:
            hints = typing.get_type_hints(func)
        except NameError as e:
            raise SpecError(f"type hints of traced function {self.name!r}", str(e),
                            "every name in a type hint must resolve where the function is "
                            "defined", "import the type at module level") from e
        self.hints = {p: hints.get(p, _NO_HINT) for p in self.signature.parameters}
        self.generator = inspect.isgeneratorfunction(func) or inspect.isasyncgenfunction(func)
        # What is recorded: the return value, or the list of a generator's items.
        self.returns = hints.get("return", _NO_HINT)
        if self.generator:
            self.returns = self._items_hint(self.returns)

    def _items_hint(self, returns: Any) -> Any:
        if returns is _NO_HINT or returns is Any:
            return _NO_HINT
        origin = typing.get_origin(returns) or returns
        if origin not in _ITERATORS:
            raise SpecError(f"return hint of traced generator {self.name!r}", returns,
                            "must name the items it yields",
                            "annotate it -> Iterator[int] (async: -> AsyncIterator[int])")
        args = typing.get_args(returns)
        return list[args[0]] if args else _NO_HINT  # type: ignore[valid-type]

    def encode_inputs(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        from shoal._storage import codecs
        from shoal._storage.blobs import store_blobs

        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        blobs = store_blobs()
        return {name: codecs.encode(value, self.hints[name], blobs=blobs, allow_pickle=True,
                                    field=f"input {name!r} of traced function {self.name!r}")
                for name, value in bound.arguments.items()}

    def encode_output(self, value: Any) -> Any:
        from shoal._storage import codecs
        from shoal._storage.blobs import store_blobs

        return codecs.encode(value, self.returns, blobs=store_blobs(), allow_pickle=True,
                             field=f"output of traced function {self.name!r}")

    def decode_output(self, literal: Any) -> Any:
        from shoal._storage import codecs
        from shoal._storage.blobs import store_blobs

        return codecs.decode(literal, self.returns, blobs=store_blobs(), allow_pickle=True,
                             field=f"recorded output of traced function {self.name!r}")


def recording_scope(traced: Traced) -> Scope | None:
    """The scope a call of ``traced`` is recorded in; None when it just runs."""
    scope = _scope.get()
    if scope is not None:
        return scope
    c = current()
    if c.in_gang and c.client is None:  # a Ray gang's driver records its traces
        if not _warned_in_gang[0]:
            _warned_in_gang[0] = True
            warnings.warn(f"@shoal.trace: {traced.name!r} runs untraced in {c.task!r}: its "
                          "processes (the ranks of a clustered task, or a task's pod on "
                          "Kubernetes) have no controller to record to; trace it in the task "
                          "that calls this one", stacklevel=4)
        return None
    if c.client is None or c.action is None:
        return None  # outside a task
    return Scope(task=c, parent=c.action)


class TracedCall:
    """One call of a traced function inside a task: ask, run if need be, record."""

    def __init__(self, traced: Traced, scope: Scope, args: tuple[Any, ...],
                 kwargs: dict[str, Any]) -> None:
        task = scope.task
        self.traced, self.scope = traced, scope
        self.client = task.client
        self.group = current_group()
        inherited = len(scope.group) if self.group[:len(scope.group)] == scope.group else 0
        self.call = TraceCall(action=_next_name(task, scope.parent), parent_action=scope.parent,
                              name=traced.name, env=task.env or "",
                              inputs=traced.encode_inputs(args, kwargs),
                              group=self.group[inherited:],  # relative to its parent's
                              attempt=task.attempt or 0)

    def replayed(self, reply: TraceReplay | None) -> tuple[bool, Any]:
        if reply is None:
            return False, None
        try:
            return True, self.traced.decode_output(reply.output)
        except InputError as e:
            # The recorded value no longer decodes (its class changed): run the call again.
            warnings.warn(f"trace {self.call.action} ({self.traced.name}): {e}; running it "
                          "again", stacklevel=4)
            return False, None

    @contextlib.contextmanager
    def body(self) -> Iterator[None]:
        """The context the function runs in: nested traces are its children, task calls run
        as plain Python (the trace is one recorded step, as in Flyte). A generator's body is
        entered for each of its steps, so the caller between two items is left as it was."""
        token = _scope.set(Scope(task=self.scope.task, parent=self.call.action,
                                  group=self.group))
        try:
            with running(dataclasses.replace(self.scope.task, client=None)):
                yield
        finally:
            _scope.reset(token)

    def stopped(self, t0: float, why: str) -> None:
        """A generator ended before it was exhausted: recorded, never replayed."""
        assert self.client is not None
        self.client.trace_end(TraceOutcome(action=self.call.action, name=self.traced.name,
                                           seconds=time.monotonic() - t0, error=why,
                                           group=self.call.group, stopped=True))

    def finish(self, t0: float, value: Any = None, error: BaseException | None = None) -> Any:
        assert self.client is not None  # a scope exists only where a client does
        seconds = time.monotonic() - t0
        if error is not None:
            self.client.trace_end(TraceOutcome(
                action=self.call.action, name=self.traced.name, seconds=seconds,
                error=f"{type(error).__name__}: {error}", group=self.call.group))
            return None
        try:
            literal = self.traced.encode_output(value)
        except InputError as e:
            self.client.trace_end(TraceOutcome(action=self.call.action, name=self.traced.name,
                                               seconds=seconds, error=str(e),
                                               group=self.call.group))
            raise
        self.client.trace_end(TraceOutcome(action=self.call.action, name=self.traced.name,
                                           output=literal, seconds=seconds,
                                           group=self.call.group))
        return value
