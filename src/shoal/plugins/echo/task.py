"""Flyte's Echo plugin config, on Shoal: ``Echo``.

Flyte 2 code writes

    from flyteplugins.echo import Echo

    echo_env = flyte.TaskEnvironment(name="echo-env", plugin_config=Echo())

    @echo_env.task
    async def echo_identity(message: str) -> str:
        return message

and ports by renaming ``flyteplugins.`` to ``shoal.plugins.``. Flyte's backend answers such a
call in its lease worker, without a pod, by copying the input to the output; Shoal's driver
does the same on every engine (`shoal._driver.processless`): the call is an action like any
other (recorded, cached, shown by ``shoal runs RUN``), but no process starts and the body never
runs. So the signature must say what the call returns: its one input, of the input's type, or
nothing for a task without inputs (Flyte's backend copies at most one input). Anything else is
refused when ``@env.task`` makes the task. Called outside a run, the task is its plain function.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shoal._api.plugin_config import ProcesslessConfig
from shoal.errors import SpecError

if TYPE_CHECKING:
    from shoal._api.task import TaskTemplate

__all__ = ["Echo"]


@dataclass(frozen=True)
class Echo(ProcesslessConfig):
    """A task of this environment returns its input: no process starts, the body never runs."""

    KIND = "echo"

    def check_signature(self, task: TaskTemplate[Any]) -> None:
        where = f"task {task.name!r}"
        params = list(task.hints.items())
        shown = inspect.formatannotation
        if len(params) > 1:
            raise SpecError(f"parameters of {where}", ", ".join(n for n, _ in params),
                            "an Echo task returns its one input (Flyte's echo plugin copies at "
                            "most one input to the output)", "take one parameter, e.g. one "
                            "dataclass holding the values")
        if not params:
            if task.return_type not in (None, type(None)):
                raise SpecError(f"return type of {where}", shown(task.return_type),
                                "an Echo task without inputs has no output to return",
                                f"declare it `-> None`, or give it a parameter of type "
                                f"{shown(task.return_type)}")
            return
        name, hint = params[0]
        if task.return_type != hint:
            returns = "None" if task.return_type in (None, type(None)) \
                else shown(task.return_type)
            raise SpecError(f"return type of {where}", returns,
                            f"an Echo task returns its input {name!r} as it is, so it returns "
                            f"{shown(hint)}", f"declare `-> {shown(hint)}`")
