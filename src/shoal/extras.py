"""``shoal.extras``: what Flyte 2 code imports from ``flyte.extras``; so far ``Sleep``.

Flyte 2 code writes

    from datetime import timedelta
    from flyte.extras import Sleep

    sleep_env = flyte.TaskEnvironment(name="sleep-env", plugin_config=Sleep())

    @sleep_env.task
    async def sleep_for(duration: timedelta) -> None:
        return None

and ports by writing ``from shoal.extras import Sleep``. Flyte's backend sleeps such a call in
its lease worker, without a pod; Shoal's driver does the same on every engine
(`shoal._driver.processless`): the call is an action like any other (recorded, shown by
``shoal runs RUN``), it waits for its ``duration`` without a process and without holding any of
the machine's capacity, and it ends early, as any call does, when the run is cancelled or the
task's ``timeout`` / ``Timeout(deadline=)`` passes. The body never runs; called outside a run,
the task is its plain function. A Sleep task takes exactly one ``datetime.timedelta``
parameter and returns None; anything else is refused when ``@env.task`` makes it.
"""

from __future__ import annotations

import datetime as dt
import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shoal._api.plugin_config import ProcesslessConfig
from shoal.errors import SpecError

if TYPE_CHECKING:
    from shoal._api.task import TaskTemplate

__all__ = ["Sleep"]


@dataclass(frozen=True)
class Sleep(ProcesslessConfig):
    """A task of this environment waits for its ``timedelta`` input: no process, no body."""

    KIND = "sleep"

    def check_signature(self, task: TaskTemplate[Any]) -> None:
        where = f"task {task.name!r}"
        params = list(task.hints.items())
        shown = inspect.formatannotation
        if len(params) != 1 or params[0][1] is not dt.timedelta:
            given = ", ".join(f"{n}: {shown(h)}" for n, h in params) or "no parameters"
            raise SpecError(f"parameters of {where}", given,
                            "a Sleep task takes exactly one parameter, of type "
                            "datetime.timedelta: how long the call sleeps",
                            f"write `def {task.short_name}(duration: timedelta) -> None`")
        if task.return_type not in (None, type(None)):
            raise SpecError(f"return type of {where}", shown(task.return_type),
                            "a Sleep task returns nothing", "declare it `-> None`")
