"""What ``TaskEnvironment(plugin_config=...)`` accepts: the configs of Shoal's own plugins.

A plugin's config (``shoal.plugins.<name>``, Flyte's ``flyteplugins.<name>``) subclasses
`PluginConfig` and says, once, what it makes of the environment it is given to: a gang shape
(`ClusterSpec`), variables for the task's processes, defaults for its tasks. The environment
asks it when it is built, so a config's mistakes are `SpecError`s at that moment, and the specs
engines read never name a plugin: an ``Elastic`` environment is the same `ClusterSpec` a
``ClusteredTaskEnvironment`` makes. Anything else passed as ``plugin_config`` is refused, naming
the configs Shoal provides.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from shoal._spec.call import ClusterSpec

if TYPE_CHECKING:
    from shoal._api.task import TaskTemplate

__all__ = ["PROVIDED", "PluginConfig", "PluginSettings", "ProcesslessConfig", "check_int",
           "ray_join_vars"]

# The configs ``plugin_config=`` takes, as a user imports them (named in the refusal of others).
PROVIDED = ("shoal.plugins.pytorch.Elastic", "shoal.plugins.ray.RayJobConfig",
            "shoal.plugins.echo.Echo", "shoal.extras.Sleep")


@dataclass(frozen=True)
class PluginSettings:
    """What a plugin config makes of one environment."""

    cluster: ClusterSpec | None = None  # the environment's tasks run as this gang
    # Variables of every process of the task (the user's own ``env_vars`` win).
    env_vars: Mapping[str, str] = field(default_factory=dict)
    task_timeout: float | None = None  # a task's max_runtime when it sets none
    task_retries: int | None = None  # a task's retries when it sets none
    # The driver answers the environment's calls without a process (`EnvSpec.processless`).
    processless: str = ""


class PluginConfig:
    """The base of a plugin config ``TaskEnvironment(plugin_config=)`` accepts."""

    def environment_settings(self, where: str) -> PluginSettings:
        """What this config makes of the environment ``where`` names (for errors); raises
        `SpecError` for what it cannot honour."""
        raise NotImplementedError

    def check_task(self, task: TaskTemplate[Any]) -> None:
        """Raise `SpecError` for a task of this config's environment it cannot run (its
        signature, its settings), when ``@env.task`` makes it; any task by default."""
        return None

    def check_reuse(self, where: str, reusable: Any) -> None:
        """Raise `SpecError` unless this config's environment may keep its gang between calls
        (``reusable=ReusePolicy(...)``); a gang of ranks never can."""
        from shoal.errors import SpecError

        raise SpecError(f"{where}.reusable", reusable, "a gang's nodes and ranks are started "
                        "for each call, never reused", "leave reusable out with this "
                        "plugin_config")

    def overridden(self, field: str, value: int) -> PluginConfig:
        """This config with its gang's ``field`` set to ``value`` (``shoal run --override``),
        or a `SpecError` naming what may be overridden."""
        from shoal.errors import SpecError

        raise SpecError("--override", field, f"{type(self).__name__} makes no gang whose size "
                        "can be overridden", "leave --override out for this environment")


class ProcesslessConfig(PluginConfig):
    """The base of a config whose environment's calls the driver answers itself, with no
    process on any engine (``Echo``, ``Sleep``: Flyte runs them in its backend, no pod).

    A subclass names its ``KIND`` (what `shoal._driver.processless` does with a call) and
    checks its tasks' signatures in `check_signature`."""

    KIND = ""

    def environment_settings(self, where: str) -> PluginSettings:
        return PluginSettings(processless=self.KIND)

    def check_reuse(self, where: str, reusable: Any) -> None:
        from shoal.errors import SpecError

        raise SpecError(f"{where}.reusable", reusable, f"plugin_config={type(self).__name__}()"
                        " starts no process (the driver answers each call), so there is no "
                        "worker to reuse", "leave reusable out")

    def check_task(self, task: TaskTemplate[Any]) -> None:
        from shoal.errors import SpecError

        if task.report:
            raise SpecError(f"task {task.name!r}: report", True, "its body never runs "
                            f"(plugin_config={type(self).__name__}()), so it writes no report",
                            "leave report out")
        self.check_signature(task)

    def check_signature(self, task: TaskTemplate[Any]) -> None:
        """Raise `SpecError` unless ``task``'s parameters and return type fit this config."""
        raise NotImplementedError


def check_int(field_name: str, value: object, minimum: int, example: str,
              *, optional: bool = False) -> None:
    """A plugin config's int field: ``minimum`` or more (or None, when ``optional``), never
    a bool; else a `SpecError` naming the field and an example."""
    from shoal.errors import SpecError

    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        rule = f"must be an int >= {minimum}" + (" or None" if optional else "")
        raise SpecError(field_name, value, rule, f"e.g. {example}")


def ray_join_vars(address: str, runtime_env: Any) -> dict[str, str]:
    """The variables that make a plain task's process connect to the Ray cluster at
    ``address`` (with ``runtime_env``) before its body runs (read by the worker)."""
    import json

    from shoal import _contract as contract

    return {contract.RAY_INIT: json.dumps({"address": address, "runtime_env": runtime_env})}


def settings_of(where: str, config: Any) -> PluginSettings | None:
    """The settings of ``plugin_config=config``, or a `SpecError` naming what is accepted."""
    from shoal.errors import SpecError

    if config is None:
        return None
    if not isinstance(config, PluginConfig):
        raise SpecError(f"{where}.plugin_config", config,
                        f"must be one of Shoal's plugin configs ({', '.join(PROVIDED)})",
                        _fix_for(config))
    return config.environment_settings(where)


def _fix_for(config: Any) -> str:
    """What to pass instead of ``config``: the rename of a Flyte plugin Shoal provides, the
    config a part belongs in, or where the rest of Flyte's plugins' work goes on Shoal."""
    module, name = type(config).__module__, type(config).__qualname__
    if module.startswith("flyteplugins."):
        plugin = module.split(".")[1]
        if plugin in ("pytorch", "ray", "echo"):
            return (f"import it from shoal.plugins instead of flyteplugins: "
                    f"`from shoal.plugins.{plugin} import {name}` (rename `flyteplugins.` to "
                    "`shoal.plugins.` in the imports)")
        return (f"Shoal has no counterpart of {module}.{name}: use "
                "shoal.clustered.ClusteredTaskEnvironment for multi-node torch/JAX, "
                "shoal.plugins.ray.RayJobConfig for a Ray cluster, or start the framework "
                "(Spark, Dask, ...) inside a task")
    if module.startswith("flyte.extras") and name == "Sleep":
        return "import it from shoal instead of flyte: `from shoal.extras import Sleep`"
    if module.startswith("shoal.plugins.pytorch") and name == "RunPolicy":
        return "a RunPolicy goes inside the Elastic config: plugin_config=Elastic(..., " \
               "run_policy=RunPolicy(...))"
    return ("use shoal.clustered.ClusteredTaskEnvironment for multi-node torch/JAX, or start "
            "the framework (Spark, Dask, ...) inside a task")
