"""``task.override(...)``: the same task, called with other settings (Flyte 2's ``override``).

An overridden task is a new `TaskTemplate` around the same function: its calls carry a spec
whose retries, timeout and cache, and whose environment's resources, env_vars, secrets, pod
template and interruptible flag, are the overridden ones. Everything downstream reads the call's
spec, so admission, the cache key, the worker a call runs in and the Kubernetes manifests
follow the override without knowing one was made. Values are checked here, with the rules and
messages of ``@env.task`` and ``TaskEnvironment``.

Differences from Flyte 2, on purpose: a keyword that is not given keeps the task's value, so
``retries=0`` turns retries off (Flyte reads a falsy value as "keep"); ``env_vars`` are added to
the environment's (Flyte replaces them, which drops the environment's own variables);
``resources``, ``env_vars`` and ``secrets`` may be overridden on a reusable environment's task
without ``reusable="off"`` (Flyte requires it: its replicas are shared containers; here a call
with other env_vars or secrets runs in a worker started with them).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from shoal._api.cache import to_cache
from shoal._api.environment import check_env_vars
from shoal._api.pod_template import PodTemplate, with_queue
from shoal._api.secret import secret_specs
from shoal._api.task import TaskTemplate
from shoal._api.task_options import retry_settings, timeout_settings
from shoal._api.task_settings import link_names
from shoal._spec.call import ReuseSpec, TaskSpec, frozen_map
from shoal._spec.profile import ProfileSpec
from shoal.errors import SpecError

# Flyte 2 names override() accepts that have no meaning here, each with what to do instead.
_REFUSED = {
    "name": "the task's name is how its worker finds it and part of its cache key; "
            "define another task (or pass name= to @env.task)",
    "image": "an image belongs to the environment; define another TaskEnvironment",
    "replicas": "a gang's shape belongs to its ClusteredTaskEnvironment: use "
                "`shoal run --override ENV.replicas=N` or define another environment",
    "nproc_per_node": "a gang's shape belongs to its ClusteredTaskEnvironment: use "
                      "`shoal run --override ENV.nproc_per_node=N` or define another "
                      "environment",
}
_ENV_FIELDS = ("resources", "env_vars", "secrets", "pod_template", "interruptible", "reusable",
               "queue")
# reusable="off": each call in a fresh worker process that exits after it (Flyte: a fresh
# container instead of a reusable one).
_FRESH_WORKER = ReuseSpec(max_workers=0, idle_ttl=1.0)


class _Overridden(TaskTemplate[Any]):
    """A task whose calls' environment differs from its environment's in ``_env_changes``.

    It is not registered with its environment: a worker finds the task by name and runs the
    same function; what differs travels in the call's spec."""

    _env_changes: dict[str, Any]

    def spec(self) -> TaskSpec:
        if self._spec is None:
            base = super().spec()
            changes = dict(self._env_changes)
            if "env_vars" in changes:
                changes["env_vars"] = frozen_map({**base.env.env_vars, **changes["env_vars"]})
            self._spec = replace(base, env=replace(base.env, **changes))
        return self._spec

    def forget_spec(self) -> None:
        self._spec = None

    def __repr__(self) -> str:
        return f"<task {self.name} (overridden)>"


def override_task(task: TaskTemplate[Any], **changes: Any) -> TaskTemplate[Any]:
    """A copy of ``task`` whose calls use ``changes`` (validated now)."""
    where = f"{task.name}.override"
    for key, value in changes.items():
        if key in _REFUSED:
            raise SpecError(f"{where}({key}=...)", value, "cannot be overridden",
                            _REFUSED[key])
        if key not in ("retries", "timeout", "cache", "short_name", "links", *_ENV_FIELDS):
            raise SpecError(f"{where}({key}=...)", value, "is not a setting Shoal can override",
                            "override one of: retries, timeout, cache, short_name, links, "
                            "resources, env_vars, secrets, pod_template, interruptible, "
                            "reusable, queue")
    given = {k: v for k, v in changes.items() if v is not None}
    new = _copy(task)
    if "retries" in given:
        new.retries, new.backoff = retry_settings(f"task {task.name!r}: retries",
                                                  given["retries"])
    if "timeout" in given:
        new.timeout, new.max_queued_time, new.deadline = timeout_settings(
            f"task {task.name!r}: timeout", given["timeout"])
    if "short_name" in given:
        short = given["short_name"]
        if not isinstance(short, str) or not short:
            raise SpecError(f"{where}(short_name=...)", short, "must be a non-empty string",
                            'e.g. short_name="train-large"')
        new.settings = replace(new.settings, short_name=short)  # shown, not how it is found
    if "links" in given:  # shown, not rendered (`shoal._api.task_settings`)
        new.settings = replace(new.settings, links=link_names(where, given["links"]))
    if "cache" in given:
        new.cache_override = to_cache(given["cache"], field_name="task.cache")
    env_changes = dict(getattr(task, "_env_changes", {}))
    env_changes.update(_env_changes(task, given, env_changes))
    new._env_changes = env_changes
    new._spec = None
    return new


def with_profile(task: TaskTemplate[Any], profile: ProfileSpec) -> TaskTemplate[Any]:
    """A copy of ``task`` whose calls are profiled by ``profile`` (``shoal.plugins.nsight``'s
    ``nsys_profile``): the profile travels in the call's spec, as an environment's own does,
    and ``shoal run --profile ENV:...`` replaces it for a run as it replaces that one."""
    new = _copy(task)
    new._env_changes = {**getattr(task, "_env_changes", {}), "profile": profile}
    new._spec = None
    return new


def _copy(task: TaskTemplate[Any]) -> _Overridden:
    new: _Overridden = _Overridden.__new__(_Overridden)
    new.__dict__.update(task.__dict__)
    return new


def _env_changes(task: TaskTemplate[Any], given: dict[str, Any],
                 earlier: dict[str, Any]) -> dict[str, Any]:
    from shoal._api.resources import Resources

    env = task.env
    kind = type(env).__name__
    out: dict[str, Any] = {}
    if "resources" in given:
        if getattr(env, "replicas", None) is not None:
            raise SpecError(f"{task.name}.override(resources=...)", given["resources"],
                            "cannot be overridden on a clustered task: a gang's per-node "
                            "resources are checked against its shape (one process per GPU) "
                            "and admitted with it",
                            f"set resources on a ClusteredTaskEnvironment of its own (like "
                            f"{env.name!r}) and define the task there")
        if not isinstance(given["resources"], Resources):
            raise SpecError(f"{kind}({env.name!r}).resources", given["resources"],
                            "must be shoal.Resources(...)",
                            'use shoal.Resources(cpu=2, memory="4Gi")')
        out["resources"] = given["resources"]
    if "env_vars" in given:
        added = check_env_vars(f"{kind}({env.name!r}).env_vars", given["env_vars"])
        out["env_vars"] = {**earlier.get("env_vars", {}), **added}
    if "secrets" in given:
        out["secrets"] = secret_specs(f"{kind}({env.name!r}).secrets", given["secrets"])
    if "pod_template" in given:
        if not isinstance(given["pod_template"], PodTemplate):
            raise SpecError(f"{kind}({env.name!r}).pod_template", given["pod_template"],
                            "must be shoal.PodTemplate(...)",
                            'use shoal.PodTemplate(labels={"kueue.x-k8s.io/queue-name": "team-a"})')
        out["pod_template"] = given["pod_template"]
    if "queue" in given:
        base = out.get("pod_template", task.spec().env.pod_template)
        out["pod_template"] = with_queue(f"{task.name}.override(queue=...)", given["queue"],
                                         base, replace=True)
    if "reusable" in given:
        from shoal._api.reuse import ReusePolicy

        value = given["reusable"]
        if value != "off" and not isinstance(value, ReusePolicy):
            raise SpecError(f"{task.name}.override(reusable=...)", value,
                            'must be "off" or shoal.ReusePolicy(...)',
                            'use reusable="off" to run the calls in fresh processes')
        out["reuse"] = _FRESH_WORKER if value == "off" else value.spec()
    if "interruptible" in given:
        if not isinstance(given["interruptible"], bool):
            raise SpecError(f"{kind}({env.name!r}).interruptible", given["interruptible"],
                            "must be a bool", "use True or False")
        out["interruptible"] = given["interruptible"]
    return out

