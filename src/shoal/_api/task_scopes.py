"""What a plugin decorator returns: a task with a scope around its body, or a plain function
run inside that scope.

``@wandb_init`` on a task adds its config to the task (`TaskTemplate.with_scope`); the process
that runs the body enters the scope the plugin's part makes of it
(`shoal._runtime.task_scopes`). On a plain function (Flyte allows ``@wandb_init`` on a sweep's
objective, which ``wandb.agent`` calls) the same scope is entered around each call, here.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from shoal._api.task import TaskTemplate
from shoal._runtime.task_scopes import scope_of

__all__ = ["scoped"]

F = TypeVar("F", bound=Callable[..., Any])


def scoped(target: F, config: object, links: tuple[str, ...] = ()) -> F:
    """``target`` (a task, or a plain function) whose calls run inside the scope of ``config``;
    ``links``: link names added to a task."""
    if isinstance(target, TaskTemplate):
        return target.with_scope(config, links)  # type: ignore[return-value]
    if inspect.iscoroutinefunction(target):
        @functools.wraps(target)
        async def run_async(*args: Any, **kwargs: Any) -> Any:
            with scope_of(config):
                return await target(*args, **kwargs)

        return run_async  # type: ignore[return-value]

    @functools.wraps(target)
    def run(*args: Any, **kwargs: Any) -> Any:
        with scope_of(config):
            return target(*args, **kwargs)

    return run  # type: ignore[return-value]
