"""Plugin scopes around a task's body: what a decorator such as ``@wandb_init`` adds to a task.

A plugin decorator does not wrap the task's function (the function is how a worker finds the
task and what its cache key reads); it returns the task with a *scope config* added
(`TaskTemplate.scopes`, frozen values of the plugin's surface). Every process that runs the
body (a warm worker, each rank of a gang) enters, around the call, the scope the plugin's
engine-side part makes of each config, found in `shoal._plugins` by the config's type. So one
decorator works on every engine, and the plugin's dependencies (wandb) load only in a process
that runs such a task.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext

from shoal._plugins import NEUTRAL, part_for
from shoal.errors import ShoalSystemError


class TaskScopePart:
    """What a plugin registers (engine `NEUTRAL`) for a scope config it defines."""

    def scope(self, config: object) -> AbstractContextManager[object]:
        """Entered in the task's process, inside its `shoal.ctx()`, around its body."""
        raise NotImplementedError


def scope_of(config: object) -> AbstractContextManager[object]:
    """The scope the plugin that defines ``config`` makes of it."""
    part = part_for(config, NEUTRAL, TaskScopePart)
    if part is None:
        raise ShoalSystemError(f"no plugin part handles the task scope {config!r} "
                               f"({type(config).__module__}.{type(config).__qualname__})")
    return part.scope(config)


def task_scopes(configs: Sequence[object]) -> AbstractContextManager[object]:
    """Every scope of ``configs`` entered, the last added first: as with wrappers, the
    decorator written outermost (applied last) holds the others inside it. No scope (most
    tasks): nothing to enter, at each of a warm worker's calls."""
    return _entered(configs) if configs else nullcontext()


@contextmanager
def _entered(configs: Sequence[object]) -> Iterator[None]:
    with ExitStack() as stack:
        for config in reversed(configs):
            stack.enter_context(scope_of(config))
        yield
