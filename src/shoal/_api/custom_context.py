"""`shoal.custom_context(**kv)` and `shoal.get_custom_context()`: Flyte 2's custom context.

A custom context is a dict of str to str that travels with every task call, so metadata
(a project, a trace id) reaches every task below without being an input. Each call carries
the context of the code that made it (``CallSpec.custom_context``): inside a task, the dict its
own call was made with, plus what the ``with shoal.custom_context(...)`` blocks around the call
added or overrode. The worker that runs a call makes that dict its task's context, so it
reaches grandchildren in other processes; ``with_runcontext(custom_context=...)`` seeds the
root call's. ``shoal.ctx().custom_context`` reads the same dict inside a task.
As in Flyte, it is not part of the cache key: a cached call returns its stored outputs whatever
context it is called with. Unlike Flyte, a block outside any task is not ignored: it sets the
context of the runs started in it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from shoal._runtime.context import called_with, custom_block
from shoal.errors import SpecError


def check_custom_context(field: str, values: object) -> dict[str, str]:
    """``values`` as a dict of str to str, or a ``SpecError`` naming the bad key."""
    if not isinstance(values, Mapping):
        raise SpecError(field, values, "must be a dict of str to str",
                        'e.g. {"project": "ml", "trace_id": "abc"}')
    out: dict[str, str] = {}
    for key, value in values.items():
        if not isinstance(key, str) or not key:
            raise SpecError(field, key, "keys must be non-empty strings", 'e.g. "project"')
        if not isinstance(value, str):
            raise SpecError(f"{field}[{key!r}]", value,
                            "values must be strings, as in Flyte's custom context",
                            f"pass {key}={str(value)!r}, and parse it back in the task")
        out[key] = value
    return out


def current_custom_context() -> dict[str, str]:
    """The context a task call made here now carries."""
    block = custom_block.get()
    return dict(block) if block is not None else dict(called_with())


def get_custom_context() -> dict[str, str]:
    """Inside a task: the custom context its call was made with (and what the blocks open
    around this line add); outside: what the open ``custom_context`` blocks set, or ``{}``."""
    return current_custom_context()


@contextmanager
def custom_context(**context: str) -> Iterator[None]:
    """Task calls made in the block carry these keys (added to, or overriding, the current
    context); so do the calls those tasks make, in whatever process they run."""
    values = check_custom_context("custom_context(...)", context)
    token = custom_block.set({**current_custom_context(), **values})
    try:
        yield
    finally:
        custom_block.reset(token)
