"""`TaskTemplate`: a function made a task by ``@env.task``, and what calling it does.

Calling a task outside any run calls the plain function. Inside a running task, the call is
submitted to the engine in the callee's environment: the inputs are encoded here, in the
caller, so a bad value fails at the call site, and the output is decoded here too.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from shoal._api.cache import Cache
from shoal._api.custom_context import current_custom_context
from shoal._api.group import current_group
from shoal._api.plugin_config import PluginConfig
from shoal._api.task_options import retry_settings, timeout_settings
from shoal._api.task_settings import TaskSettings
from shoal._runtime import task_registry
from shoal._runtime.context import current
from shoal._runtime.task_registry import LoadableTask
from shoal._spec.call import CallSpec, TaskSpec, frozen_map
from shoal._spec.code import code_hash
from shoal._spec.names import check_task_name
from shoal.errors import MissingDependencyError, SpecError

if TYPE_CHECKING:
    from shoal._api.environment import TaskEnvironment

F = TypeVar("F", bound=Callable[..., Any])


class TaskTemplate(LoadableTask, Generic[F]):
    """A task: a typed function bound to an environment."""

    def __init__(
        self,
        env: TaskEnvironment,
        func: F,
        *,
        name: str | None,
        retries: int,
        timeout: object,
        cache: Cache | None,
        allow_pickle: bool,
        report: bool = False,
        settings: TaskSettings | None = None,
    ) -> None:
        from shoal._storage import codecs

        if not callable(func) or not hasattr(func, "__code__"):
            raise SpecError("@env.task", func, "must decorate a function", "put it on a def")
        self.env = env
        self.func = func
        # A given name is the key a worker finds the task by and a folder of the cache.
        self.short_name = func.__name__ if name is None else check_task_name("@env.task(name=)",
                                                                             name)
        self.name = f"{env.name}.{self.short_name}"
        functools.update_wrapper(self, func)  # type: ignore[arg-type]
        self.retries, self.backoff = retry_settings(f"task {self.name!r}: retries", retries)
        self.timeout, self.max_queued_time, self.deadline = timeout_settings(
            f"task {self.name!r}: timeout", timeout)
        default_timeout, default_retries = env.task_defaults()
        if self.timeout is None and default_timeout is not None:
            self.timeout = default_timeout  # e.g. RunPolicy(active_deadline_seconds=)
        if self.retries == 0 and self.backoff is None and default_retries is not None:
            self.retries = default_retries  # e.g. RunPolicy(backoff_limit=)
        self.settings = settings or TaskSettings()
        self.cache_override = cache
        self.allow_pickle = bool(allow_pickle)
        if not isinstance(report, bool):
            raise SpecError(f"task {self.name!r}: report", report, "must be a bool",
                            "use report=True to keep an HTML report (shoal.report) with the run")
        self.report = report
        # Plugin scopes around the body (`with_scope`), entered by the process that runs it.
        self.scopes: tuple[object, ...] = ()
        self.is_async = inspect.iscoroutinefunction(func)
        self.signature = inspect.signature(func)
        self.hints, self.return_type = self._read_hints(codecs)
        self._spec: TaskSpec | None = None
        if isinstance(env.plugin_config, PluginConfig):
            env.plugin_config.check_task(self)  # e.g. an Echo task's output is its input

    def _read_hints(self, codecs: Any) -> tuple[dict[str, Any], Any]:
        try:
            hints = typing.get_type_hints(self.func, include_extras=False)
        except NameError as e:
            raise SpecError(f"type hints of task {self.name!r}", str(e),
                            "every name in a type hint must resolve where the task is defined",
                            "import the type at module level (not under TYPE_CHECKING)") from e
        params: dict[str, Any] = {}
        for p in self.signature.parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise SpecError(f"parameter {p.name!r} of task {self.name!r}", str(p),
                                "*args and **kwargs cannot be typed for serialization",
                                "list each parameter, or pass one dataclass")
            if p.name not in hints:
                raise SpecError(f"parameter {p.name!r} of task {self.name!r}", p.name,
                                "needs a type hint (hints say how values move between processes)",
                                f"write `{p.name}: int` (or its real type)")
            codecs.check_type(hints[p.name], field=f"parameter {p.name!r} of task {self.name!r}",
                              allow_pickle=self.allow_pickle)
            params[p.name] = hints[p.name]
        # No return annotation means None, as in Flyte; `check_output` names the fix when
        # such a task returns a value after all.
        self.return_declared = "return" in hints
        ret = hints.get("return", None)
        codecs.check_type(ret, field=f"return type of task {self.name!r}",
                          allow_pickle=self.allow_pickle)
        return params, ret

    def check_output(self, value: object, where: str = "") -> None:
        """Refuse a value returned by a task without a return annotation (its output is None)."""
        if value is None or self.return_declared:
            return
        cls = type(value)
        shown = cls.__name__ if cls.__module__ == "builtins" \
            else f"{cls.__module__}.{cls.__qualname__}"
        raise SpecError(f"output of task {self.name!r}{where}", value,
                        "the task has no return annotation, so it returns None, but it "
                        f"returned a value of type {shown}",
                        f"declare what it returns: `def {self.short_name}(...) -> {shown}:`")

    def __repr__(self) -> str:
        return f"<task {self.name}>"

    # -- spec --------------------------------------------------------------------------
    def forget_spec(self) -> None:
        """Drop the cached spec after the environment changed (``--override``)."""
        self._spec = None

    def spec(self) -> TaskSpec:
        if self._spec is None:
            rendered = ", ".join(f"{k}: {v!r}" for k, v in self.hints.items())
            cache = self.env.cache_spec(self.cache_override)
            # the key takes the version instead of the code: walking the code would be wasted
            keyed_on_code = cache.behavior != "disable" and cache.version is None
            env = self.env.spec()
            changes = self.settings.env_changes()
            self._spec = TaskSpec(
                name=self.name,
                env=dataclasses.replace(env, **changes) if changes else env,
                code_file=inspect.getfile(self.func),
                code_hash=code_hash(self.func) if keyed_on_code else "",
                signature=f"({rendered}) -> {self.return_type!r}",
                retries=self.retries,
                timeout=self.timeout,
                cache=cache,
                allow_pickle=self.allow_pickle,
                is_async=self.is_async,
                report=self.report,
                backoff=self.backoff,
                max_queued_time=self.max_queued_time,
                deadline=self.deadline,
                display_name=self.settings.short_name,
                docs=self.settings.docs_for(self.func),
                links=self.settings.links,
                entrypoint=self.settings.entrypoint,
                reference_inputs=self._reference_inputs(),
            )
        return self._spec

    def _reference_inputs(self) -> tuple[str, ...]:
        from shoal._api.io import Dir, File

        return tuple(name for name, hint in self.hints.items() if hint in (File, Dir))

    def override(self, **changes: Any) -> TaskTemplate[F]:
        """This task with other settings for its calls: ``retries``, ``timeout``, ``cache``,
        ``resources``, ``env_vars`` (added to the environment's), ``secrets``,
        ``pod_template``, ``interruptible``. Checked now, as ``@env.task`` checks them."""
        from shoal._api.override import override_task

        return override_task(self, **changes)

    def with_scope(self, config: object, links: tuple[str, ...] = ()) -> TaskTemplate[F]:
        """This task with a plugin's scope config added around its body (what a plugin
        decorator such as ``@wandb_init`` returns), and ``links`` added to its link names.

        The copy is what the decorator binds to the task's name in its module, which is where
        a worker finds the task (it also takes the original's place in its environment), so
        every call of it, from any process, runs in the scope (`shoal._runtime.task_scopes`).
        """
        new = copy.copy(self)
        new.scopes = (*self.scopes, config)
        if links:
            new.settings = dataclasses.replace(self.settings,
                                               links=(*self.settings.links, *links))
            new.forget_spec()
        if self.env.tasks.get(self.short_name) is self:
            self.env.tasks[self.short_name] = new  # the environment's task is the scoped one
        return new

    # -- calling -----------------------------------------------------------------------
    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as e:
            raise SpecError(f"call of task {self.name!r}", f"args={args!r} kwargs={kwargs!r}",
                            str(e), f"call it as {self.name.split('.')[-1]}{self.signature}") from e
        bound.apply_defaults()
        return dict(bound.arguments)

    def make_call(self, args: tuple[Any, ...], kwargs: dict[str, Any],
                  parent_action: str | None) -> CallSpec:
        from shoal._storage import codecs
        from shoal._storage.blobs import store_blobs

        values = self.bind(args, kwargs)
        literals = codecs.encode_inputs(values, self.hints, blobs=store_blobs(), task=self.name,
                                        allow_pickle=self.allow_pickle)
        return CallSpec(task=self.spec(), inputs=literals, parent_action=parent_action,
                        group=current_group(),
                        custom_context=frozen_map(current_custom_context()))

    def decode_output(self, literal: Any) -> Any:
        from shoal._storage import codecs
        from shoal._storage.blobs import store_blobs

        return codecs.decode(literal, self.return_type, blobs=store_blobs(),
                             field=f"output of task {self.name!r}", allow_pickle=self.allow_pickle)

    def _check_reachable(self, caller_env: str | None) -> None:
        if caller_env is None:
            return
        caller = task_registry.ENVIRONMENTS.get(caller_env)
        if caller is not None and self.env.name not in caller.reachable():
            raise MissingDependencyError(caller_env, self.env.name, self.name)

    def _refuse_from_gang(self, c: Any) -> None:
        if c.in_gang and c.client is None:  # a Ray gang's driver has one
            raise SpecError(f"call of task {self.name!r}", f"from rank {c.rank} of {c.task!r}",
                            "a clustered task cannot call other tasks (its ranks have no "
                            "controller)", "call both from a driver task and pass values between")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Outside a run, the plain function. In a run, a call of the task in its environment:
        an async task's call returns an awaitable; a sync task's call waits for its output.

        A sync task's call waits wherever it is made, as Flyte 2's does: from an async task's
        body it blocks that body's event loop until the output is back (the calls in flight
        go on in the call client's own thread; their results are taken up once the loop runs
        again). ``await task.aio(...)`` is the call that lets the loop run meanwhile."""
        c = current()
        self._refuse_from_gang(c)
        if c.client is None:
            return self.func(*args, **kwargs)
        self._check_reachable(c.env)
        call = self.make_call(args, kwargs, c.action)
        if self.is_async:
            return self._await(c.client.submit(call))
        return self.decode_output(c.client.submit(call).result())

    async def aio(self, *args: Any, **kwargs: Any) -> Any:
        """Call the task and await it, whether its function is sync or async."""
        c = current()
        self._refuse_from_gang(c)
        if c.client is None:
            result = self.func(*args, **kwargs)
            return await result if inspect.isawaitable(result) else result
        self._check_reachable(c.env)
        call = self.make_call(args, kwargs, c.action)
        return await self._await(c.client.submit(call))

    async def _await(self, future: Any) -> Any:
        literal = await asyncio.wrap_future(future)
        return self.decode_output(literal)
