"""Flyte's calling convention for API functions: ``f(...)`` blocks, ``await f.aio(...)`` does
not. Flyte builds both from one coroutine on a loop thread (its ``syncify``); here each function
has its two implementations written out, since the blocking one is the natural one for Shoal."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, Generic, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


class SyncAio(Generic[P, R]):
    """A function that is also awaitable through ``.aio``."""

    def __init__(self, sync: Callable[P, R], aio: Callable[P, Awaitable[R]]) -> None:
        self._sync = sync
        self.aio = aio
        functools.update_wrapper(self, sync)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self._sync(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<function {self._sync.__name__.lstrip('_')} (and .aio)>"


class SyncAioMethod:
    """`SyncAio` for methods: ``obj.wait()`` and ``await obj.wait.aio()``."""

    def __init__(self, sync: Callable[..., Any], aio: Callable[..., Awaitable[Any]]) -> None:
        self._sync = sync
        self._aio = aio
        self.__doc__ = sync.__doc__

    def __get__(self, obj: object, owner: type | None = None) -> Any:
        if obj is None:
            return self
        return SyncAio(self._sync.__get__(obj, owner), self._aio.__get__(obj, owner))
