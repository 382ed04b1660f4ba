"""`TaskEnvironment`: where a group of tasks runs (image, resources, env vars, dependencies)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar, overload

from shoal import _contract as contract
from shoal._api.cache import Cache, CacheRequest, to_cache
from shoal._api.image import env_name_guess
from shoal._api.pod_template import PodTemplate, with_queue
from shoal._api.secret import secret_specs
from shoal._api.task import TaskTemplate
from shoal._api.task_settings import TaskSettings
from shoal._runtime import task_registry
from shoal._spec.call import CacheSpec, ClusterSpec, EnvSpec, frozen_map
from shoal._spec.names import check_env_name
from shoal._spec.secret_names import shown
from shoal.errors import SpecError

F = TypeVar("F", bound=Callable[..., Any])

_ENV_VAR = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Variables the engine sets for every task process: a user value would break the contract.
_RESERVED = frozenset(
    {
        contract.TORCH_RANK,
        contract.TORCH_LOCAL_RANK,
        contract.TORCH_WORLD_SIZE,
        contract.TORCH_LOCAL_WORLD_SIZE,
        contract.TORCH_GROUP_RANK,
        contract.TORCH_MASTER_ADDR,
        contract.TORCH_MASTER_PORT,
        contract.DS_LOCAL_SIZE,
        contract.DS_CROSS_RANK,
        contract.DS_CROSS_SIZE,
    }
)

def registered_environments() -> Mapping[str, TaskEnvironment]:
    return task_registry.ENVIRONMENTS


def check_env_vars(field: str, value: object) -> dict[str, str]:
    """``env_vars``: names as POSIX has them, values strings (or numbers) without a NUL byte.
    A `shoal.NotSecret` value stays one, so the engines show it as it is."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SpecError(field, value, "must be a dict of str to str",
                        'e.g. {"OMP_NUM_THREADS": "1"}')
    out: dict[str, str] = {}
    for key, val in value.items():
        if not isinstance(key, str) or not _ENV_VAR.match(key):
            raise SpecError(
                f"{field}[{key!r}]", key,
                "must be an environment variable name [A-Za-z_][A-Za-z0-9_]* (no '=', no "
                "blank, no NUL byte)", f"rename it, e.g. {env_name_guess(key)!r}",
            )
        if key in _RESERVED or key.startswith(contract.PREFIX):
            raise SpecError(
                f"{field}[{key!r}]", key,
                "is set by Shoal for every task process (the rank/topology contract)",
                "read it from shoal.ctx() instead of setting it",
            )
        if isinstance(val, bool) or not isinstance(val, str | int | float):
            raise SpecError(f"{field}[{key!r}]", val, "must be a string", f'use "{val}"')
        text = val if isinstance(val, str) else str(val)
        if "\x00" in text:
            # The OS ends a variable at a NUL: the process would get another value, and
            # starting it fails deep in subprocess. Say so now, without showing a secret.
            raise SpecError(f"{field}[{key!r}]", shown(key, text),
                            "an environment variable's value cannot hold a NUL byte (\\x00)",
                            "remove the NUL byte from the value")
        out[key] = text
    return out


class TaskEnvironment:
    """A group of tasks that share an image, resources, environment variables and dependencies.

    ``depends_on`` lists the environments whose tasks this environment's tasks call; a call
    into any other environment fails with `MissingDependencyError`, locally as on a cluster.
    ``env_vars``: a value whose name or look says it is a secret (``DB_PASSWD``, ``sk-…``,
    ``postgres://u:pw@db``; see `shoal._spec.secret_names`) reaches the task but is redacted in
    every plan and log, left out of Slurm scripts and refused in Kubernetes manifests (use
    ``secrets=``); wrap a false alarm in `shoal.NotSecret`.
    ``secrets``: keys and `shoal.Secret` values (see `shoal._api.secret`). ``reusable``: a
    `shoal.ReusePolicy` bounding the local engine's warm workers. ``queue``: the Kueue queue
    label of the pod template. ``plugin_config``: one of Shoal's plugin configs
    (`shoal._api.plugin_config.PROVIDED`: ``shoal.plugins.pytorch.Elastic`` makes the
    environment's tasks elastic gangs, ``shoal.plugins.echo.Echo`` and ``shoal.extras.Sleep``
    have the driver answer their calls without a process); any other (Flyte's Spark, Dask,
    ...) is refused.
    """

    def __init__(
        self,
        name: str,
        *,
        image: Any = None,
        resources: Any = None,
        env_vars: Mapping[str, str] | None = None,
        secrets: Any = None,
        cache: CacheRequest = "disable",
        depends_on: Iterable[TaskEnvironment] = (),
        pod_template: Any = None,
        description: str | None = None,
        interruptible: bool = False,
        reusable: Any = None,
        plugin_config: Any = None,
        queue: str | None = None,
        profile: Any = None,
    ) -> None:
        from shoal._api.image import Image
        from shoal._api.resources import Resources
        from shoal._api.reuse import ReusePolicy

        kind = type(self).__name__
        self.name = check_env_name(f"{kind}.name", name)
        # What `clone_with` starts from: the arguments as given, before they were checked.
        self._given: dict[str, Any] = dict(
            image=image, resources=resources, env_vars=env_vars, secrets=secrets, cache=cache,
            depends_on=depends_on, pod_template=pod_template, description=description,
            interruptible=interruptible, reusable=reusable, plugin_config=plugin_config,
            queue=queue, profile=profile)
        if image is not None and not isinstance(image, Image | str):
            raise SpecError(
                f"{kind}({name!r}).image", image, "must be a shoal.Image or an image URI string",
                "use shoal.Image.from_debian_base().with_pip_packages(...)",
            )
        self.image = image
        if resources is not None and not isinstance(resources, Resources):
            raise SpecError(
                f"{kind}({name!r}).resources", resources, "must be shoal.Resources(...)",
                'use shoal.Resources(cpu=2, memory="4Gi")',
            )
        self.resources = resources
        self.env_vars: Mapping[str, str] = frozen_map(
            check_env_vars(f"{kind}({name!r}).env_vars", env_vars)
        )
        self.secrets = secret_specs(f"{kind}({name!r}).secrets", secrets)
        self.cache: Cache = to_cache(cache, field_name=f"{kind}({name!r}).cache")
        if isinstance(depends_on, (str, bytes, TaskEnvironment)) or (
                depends_on is not None and not isinstance(depends_on, Iterable)):
            raise SpecError(f"{kind}({name!r}).depends_on", depends_on,
                            "must be a list of environments", "e.g. depends_on=[data_env]")
        deps = tuple(depends_on or ())
        for dep in deps:
            if not isinstance(dep, TaskEnvironment):
                hint = (
                    f"pass its environment ({dep.env.name!r}), not the task"
                    if hasattr(dep, "env") and isinstance(dep.env, TaskEnvironment)
                    else "pass TaskEnvironment objects"
                )
                raise SpecError(f"{kind}({name!r}).depends_on", dep, "must hold environments", hint)
        self.depends_on = deps
        if pod_template is not None and not isinstance(pod_template, PodTemplate):
            raise SpecError(
                f"{kind}({name!r}).pod_template", pod_template, "must be shoal.PodTemplate(...)",
                'use shoal.PodTemplate(labels={"kueue.x-k8s.io/queue-name": "team-a"})',
            )
        self.pod_template = with_queue(f"{kind}({name!r}).queue", queue, pod_template)
        self.description = description
        if not isinstance(interruptible, bool):
            raise SpecError(f"{kind}({name!r}).interruptible", interruptible, "must be a bool",
                            "use True or False")
        self.interruptible = interruptible
        if reusable is not None and not isinstance(reusable, ReusePolicy):
            raise SpecError(f"{kind}({name!r}).reusable", reusable, "must be shoal.ReusePolicy",
                            "e.g. reusable=shoal.ReusePolicy(replicas=2, idle_ttl=300)")
        self.reusable = reusable
        from shoal._api.plugin_config import settings_of

        self.plugin_config = plugin_config
        self._plugin = settings_of(f"{kind}({name!r})", plugin_config)
        if self._plugin is not None:
            # The plugin's variables (NCCL knobs, ...) under the user's own, which win.
            self.env_vars = frozen_map({**self._plugin.env_vars, **self.env_vars})
            if (self._plugin.cluster is not None or self._plugin.processless) \
                    and reusable is not None:
                plugin_config.check_reuse(f"{kind}({name!r})", reusable)
        from shoal._spec.profile import Profile

        if profile is not None and not isinstance(profile, Profile):
            raise SpecError(f"{kind}({name!r}).profile", profile, "must be shoal.Profile(...)",
                            "e.g. profile=shoal.Profile(ranks=[0], steps=(10, 12))")
        self.profile: Profile | None = profile
        self.tasks: dict[str, TaskTemplate[Any]] = {}
        task_registry.ENVIRONMENTS[self.name] = self

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"

    def clone_with(self, name: str, **changes: Any) -> TaskEnvironment:
        """A new environment named ``name`` with this one's settings except ``changes``
        (Flyte 2's ``clone_with``: ``reusable=None`` turns reuse off). Its tasks are its own:
        none of this environment's are copied."""
        unknown = sorted(set(changes) - set(self._given))
        if unknown:
            raise SpecError(f"{self!r}.clone_with({unknown[0]}=...)", changes[unknown[0]],
                            f"is not a setting of {type(self).__name__}",
                            "change one of: " + ", ".join(sorted(self._given)))
        return type(self)(name, **{**self._given, **changes})

    def gang(self) -> ClusterSpec | None:
        """The gang this environment's tasks run as (`override` then applies), overrides in;
        None: each call is one process."""
        return self._cluster_spec()

    def override(self, field: str, value: int) -> None:
        """``shoal run --override ENV.FIELD=N`` of the gang a plugin config made (``Elastic``):
        ``replicas`` (its MAX nodes), ``min_replicas`` (its MIN) or ``nproc_per_node``,
        re-validated by the config; nothing changes when it refuses."""
        from shoal._api.plugin_config import settings_of

        if self._plugin is None or self._plugin.cluster is None:
            raise SpecError("--override", f"{self.name}.{field}",
                            f"{self!r} runs its tasks as one process each, not as a gang",
                            "override a clustered environment (ClusteredTaskEnvironment, or "
                            "TaskEnvironment(plugin_config=Elastic(...)))")
        config = self.plugin_config.overridden(field, value)
        kind = type(self).__name__
        self._plugin = settings_of(f"{kind}({self.name!r})", config)
        self.plugin_config = self._given["plugin_config"] = config
        for task in self.tasks.values():
            task.forget_spec()

    # -- the dependency graph ----------------------------------------------------------
    def reachable(self) -> dict[str, TaskEnvironment]:
        """This environment and every environment reachable from it through depends_on."""
        seen: dict[str, TaskEnvironment] = {}
        stack: list[TaskEnvironment] = [self]
        while stack:
            env = stack.pop()
            if env.name in seen:
                continue
            seen[env.name] = env
            stack.extend(env.depends_on)
        return seen

    # -- specs -------------------------------------------------------------------------
    def _cluster_spec(self) -> ClusterSpec | None:
        # ClusteredTaskEnvironment overrides; a plugin config (Elastic) may make a gang.
        return self._plugin.cluster if self._plugin is not None else None

    def task_defaults(self) -> tuple[float | None, int | None]:
        """(max_runtime, retries) of this environment's tasks that set none (a plugin's
        run policy); (None, None) without one."""
        if self._plugin is None:
            return None, None
        return self._plugin.task_timeout, self._plugin.task_retries

    def spec(self) -> EnvSpec:
        return EnvSpec(
            name=self.name,
            resources=self.resources,
            image=self.image,
            env_vars=self.env_vars,
            secrets=self.secrets,
            depends_on=tuple(d.name for d in self.depends_on),
            reachable=frozenset(self.reachable()),
            pod_template=self.pod_template,
            interruptible=self.interruptible,
            reuse=self.reusable.spec() if self.reusable is not None else None,
            profile=self.profile.spec() if self.profile is not None else None,
            cluster=self._cluster_spec(),
            processless=self._plugin.processless if self._plugin is not None else "",
            image_tag=(self.image if isinstance(self.image, str)
                       else self.image.uri() if self.image is not None else ""),
            image_packages=(tuple(self.image.declared_pip_requirements())
                            if self.image is not None and not isinstance(self.image, str)
                            else ()),
        )

    def cache_spec(self, override: Cache | None) -> CacheSpec:
        c = override if override is not None else self.cache
        return CacheSpec(c.behavior, c.version, c.ignored_inputs, c.salt, c.serialize)

    # -- the decorator -----------------------------------------------------------------
    @overload
    def task(self, _func: F) -> TaskTemplate[F]: ...

    @overload
    def task(
        self,
        _func: None = None,
        *,
        name: str | None = None,
        short_name: str | None = None,
        retries: Any = 0,
        timeout: Any = None,
        cache: CacheRequest = None,
        allow_pickle: bool = False,
        report: bool = False,
        docs: Any = None,
        pod_template: Any = None,
        interruptible: bool | None = None,
        links: Any = (),
        entrypoint: bool = False,
        max_inline_io_bytes: int | None = None,
        queue: str | None = None,
        triggers: Any = (),
        task_resolver: Any = None,
        produces_artifacts: bool = False,
    ) -> Callable[[F], TaskTemplate[F]]: ...

    def task(
        self,
        _func: F | None = None,
        *,
        name: str | None = None,
        short_name: str | None = None,
        retries: Any = 0,
        timeout: Any = None,
        cache: CacheRequest = None,
        allow_pickle: bool = False,
        report: bool = False,
        docs: Any = None,
        pod_template: Any = None,
        interruptible: bool | None = None,
        links: Any = (),
        entrypoint: bool = False,
        max_inline_io_bytes: int | None = None,
        queue: str | None = None,
        triggers: Any = (),
        task_resolver: Any = None,
        produces_artifacts: bool = False,
    ) -> TaskTemplate[F] | Callable[[F], TaskTemplate[F]]:
        """Make a function a task of this environment: ``@env.task`` or ``@env.task(retries=2)``.

        ``cache=None`` takes the environment's cache setting. Type hints on parameters say how
        values move between processes. ``report=True`` keeps an HTML report written with
        `shoal.report` in the run's store. The other settings are Flyte 2's; see
        `shoal._api.task_settings` for what each means here and which are refused.
        """
        settings = TaskSettings.check(
            self, short_name=short_name, docs=docs, pod_template=pod_template,
            interruptible=interruptible, links=links, entrypoint=entrypoint,
            max_inline_io_bytes=max_inline_io_bytes, queue=queue, triggers=triggers,
            task_resolver=task_resolver, produces_artifacts=produces_artifacts)

        def wrap(func: F) -> TaskTemplate[F]:
            t: TaskTemplate[F] = TaskTemplate(
                self,
                func,
                name=name,
                retries=retries,
                timeout=timeout,
                cache=None if cache is None else to_cache(cache, field_name="task.cache"),
                allow_pickle=allow_pickle,
                report=report,
                settings=settings,
            )
            self.tasks[t.short_name] = t
            return t

        if _func is not None:
            return wrap(_func)
        return wrap
