"""`shoal.with_runcontext(...)`: Flyte's per-run settings, honoured or refused one by one.

Honoured: ``name`` (validated, unique), ``env_vars`` (every task process of the run; they win
over the environment's), ``overwrite_cache`` (cached calls run again and rewrite their entry),
``disable_run_cache`` (no cache reads or writes), ``interruptible`` (every environment's flag),
``raw_data_path`` (the run's store root: outputs, files and cache entries of the run go there),
``labels``/``annotations`` and Flyte's ``project``/``domain``/``version`` (recorded with the run),
``log_level`` (Shoal's logger), ``user_log_level`` (`shoal.logger`'s), ``custom_context`` (the
root call's `shoal.custom_context`, over a block's around the run), ``metrics`` (Shoal's own:
the bridges the run's metrics go to, "tensorboard:DIR,wandb[:rank0]"), ``mode`` ("local": the
local engine, whatever init chose; "remote": the engine chosen by init/init_from_config,
said once on stderr when that is the local one).
Accepted because Shoal already does what they ask: ``copy_style`` (no bundle locally; the
Kubernetes engine bundles the code file's folder), ``preserve_original_types`` (values come back
as their declared types), ``reset_root_logger`` (Shoal never touches the root logger),
``interactive_mode=False``, ``cache_lookup_scope="global"`` (one cache per store).
Everything else is refused with the alternative, unless left at Flyte's default.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from shoal._api.custom_context import check_custom_context
from shoal._api.environment import check_env_vars
from shoal._api.task import TaskTemplate
from shoal._driver.bridges.spec import check_installed, parse_bridges
from shoal._driver.engine_choice import engine_from_env
from shoal._driver.handle import Run, start
from shoal._driver.initialize import refuse_unless, set_log_level, set_user_log_level
from shoal._driver.run_options import RunOptions
from shoal._driver.syncaio import SyncAioMethod
from shoal._spec.names import check_run_name
from shoal.errors import SpecError

COPY_STYLES = ("loaded_modules", "all", "none")
_said_remote = False

_W = "with_runcontext"


def _str_map(field: str, value: object) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise SpecError(f"{_W}({field}=...)", value, "must be a dict of str to str",
                        f'e.g. {field}={{"team": "ml"}}')
    return dict(value)


def _bool(field: str, value: object, *, optional: bool = False) -> Any:
    if isinstance(value, bool) or (optional and value is None):
        return value
    raise SpecError(f"{_W}({field}=...)", value, "must be True or False", f"use {field}=True")


def _engine_for(mode: object) -> str | None:
    """Flyte's ``mode``: "local" runs on the local engine whatever init chose; "remote" (and
    no mode) on the engine init chose, which from Python is the local one unless set."""
    global _said_remote
    if mode is None:
        return None
    if mode == "local":
        return "local"
    if mode == "remote":
        if not _said_remote and engine_from_env() == "local":
            _said_remote = True
            print("shoal: mode='remote' runs on the local engine (each task in its own "
                  "processes, as on a cluster); for the cluster, shoal.init(engine="
                  "'kubernetes') or `shoal run --engine kubernetes FILE TASK`",
                  file=sys.stderr, flush=True)
        return None
    raise SpecError(f"{_W}(mode=...)", mode, "must be 'local' or 'remote' (Shoal has no "
                    "hybrid mode)", "use mode='local'")


class RunContext:
    """What `with_runcontext` returns: ``.run(task, *args, **kwargs)`` (and ``.run.aio``)."""

    def __init__(self, *, name: str | None, options: RunOptions, store: str | None,
                 engine: str | None = None) -> None:
        self.name = name
        self.options = options
        self.store = store
        self.engine = engine  # None: the one init chose

    def _run(self, task: TaskTemplate[Any], *args: Any, **kwargs: Any) -> Run:
        return start(task, args, kwargs, name=self.name, options=self.options,
                     store=self.store, engine=self.engine)

    async def _run_aio(self, task: TaskTemplate[Any], *args: Any, **kwargs: Any) -> Run:
        return self._run(task, *args, **kwargs)

    run = SyncAioMethod(_run, _run_aio)


def with_runcontext(mode: str | None = None, *, name: str | None = None,
                    env_vars: Mapping[str, str] | None = None, overwrite_cache: bool = False,
                    disable_run_cache: bool = False, labels: Mapping[str, str] | None = None,
                    annotations: Mapping[str, str] | None = None,
                    interruptible: bool | None = None, raw_data_path: str | None = None,
                    log_level: int | str | None = None, log_format: str = "console",
                    project: str | None = None, domain: str | None = None,
                    version: str | None = None, copy_style: str = "loaded_modules",
                    preserve_original_types: bool = False, reset_root_logger: bool = False,
                    interactive_mode: bool | None = None,
                    cache_lookup_scope: str = "global", service_account: str | None = None,
                    dry_run: bool = False, copy_bundle_to: Any = None,
                    run_base_dir: str | None = None, run_start_time: Any = None,
                    user_log_level: int | str | None = None, queue: str | None = None,
                    max_action_concurrency: int | None = None, notifications: Any = None,
                    custom_context: Mapping[str, str] | None = None, debug: bool = False,
                    tracked: bool = False, tracked_strict: bool = False,
                    metrics: str | None = None) -> RunContext:
    """Settings for the next run: ``shoal.with_runcontext(name="nightly").run(task, ...)``."""
    _refuse_the_rest(service_account=service_account, dry_run=dry_run,
                     copy_bundle_to=copy_bundle_to, run_base_dir=run_base_dir,
                     run_start_time=run_start_time,
                     queue=queue, max_action_concurrency=max_action_concurrency,
                     notifications=notifications, debug=debug,
                     tracked=tracked, tracked_strict=tracked_strict, log_format=log_format,
                     interactive_mode=interactive_mode, cache_lookup_scope=cache_lookup_scope)
    engine = _engine_for(mode)
    if copy_style not in COPY_STYLES:
        raise SpecError(f"{_W}(copy_style=...)", copy_style,
                        f"must be one of {', '.join(COPY_STYLES)}", "leave copy_style out")
    _bool("preserve_original_types", preserve_original_types)
    _bool("reset_root_logger", reset_root_logger)
    label_map = _str_map("labels", labels)
    for key, value in (("project", project), ("domain", domain), ("version", version)):
        if value is not None:
            if not isinstance(value, str) or not value:
                raise SpecError(f"{_W}({key}=...)", value, "must be a non-empty string",
                                f"use {key}='...'")
            label_map.setdefault(key, value)
    store = None
    if raw_data_path is not None:
        from shoal._storage.store import open_store

        try:
            open_store(raw_data_path)
        except SpecError as e:
            raise SpecError(f"{_W}(raw_data_path=...)", raw_data_path, e.rule, e.fix) from e
        store = raw_data_path
    set_log_level(_W, log_level)
    set_user_log_level(_W, user_log_level)
    options = RunOptions(
        env_vars=check_env_vars(f"{_W}(env_vars=...)", env_vars),
        interruptible=_bool("interruptible", interruptible, optional=True),
        overwrite_cache=_bool("overwrite_cache", overwrite_cache),
        disable_run_cache=_bool("disable_run_cache", disable_run_cache),
        labels=label_map, annotations=_str_map("annotations", annotations),
        custom_context=check_custom_context(f"{_W}(custom_context=...)", custom_context or {}),
        metrics=_bridges(metrics))
    run_name = None if name is None else check_run_name(f"{_W}(name=...)", name)
    return RunContext(name=run_name, options=options, store=store, engine=engine)


def _bridges(metrics: object) -> str | None:
    """``metrics="tensorboard:DIR,wandb"``: checked now (syntax, packages), kept as given."""
    if metrics is None:
        return None
    field = f"{_W}(metrics=...)"
    if not isinstance(metrics, str):
        raise SpecError(field, metrics, "must be a string", 'e.g. metrics="tensorboard:tb"')
    check_installed(parse_bridges(metrics, field), field)
    return metrics


def _refuse_the_rest(**given: Any) -> None:
    r = refuse_unless
    r(_W, "service_account", given["service_account"], None, "a Kubernetes setting of task "
      "pods, not of a run", "set serviceAccountName in the environment's PodTemplate, or "
      "task_service_account in the Kubernetes settings")
    r(_W, "dry_run", given["dry_run"], False, "a run from Python always runs",
      "print the plan with `shoal run --dry-run FILE TASK`")
    r(_W, "copy_bundle_to", given["copy_bundle_to"], None, "Shoal makes no bundle here",
      "`shoal run --engine kubernetes --dry-run --out DIR FILE TASK` writes what would run")
    r(_W, "run_base_dir", given["run_base_dir"], None, "run records live in SHOAL_HOME",
      "shoal.init(home=...) or home: in the config file")
    r(_W, "run_start_time", given["run_start_time"], None, "Shoal records the real start "
      "time", "pass the time your task needs as an input")
    r(_W, "queue", given["queue"], None, "queues come from each environment's PodTemplate "
      "(Kueue labels)", "set the kueue.x-k8s.io/queue-name label in a PodTemplate")
    r(_W, "max_action_concurrency", given["max_action_concurrency"], None, "the local pool "
      "admits calls by their resources", "limit a fan-out with shoal.map(..., concurrency=N)")
    r(_W, "notifications", given["notifications"], None, "Shoal sends no notifications",
      "check the run's outcome after run.wait() and notify from your script")
    r(_W, "debug", given["debug"], False, "Shoal starts no debug server",
      "run the task's function directly under a debugger")
    for key in ("tracked", "tracked_strict"):
        r(_W, key, given[key], False, "there is no Flyte control plane to report to",
          "runs are recorded locally: shoal runs, shoal ui")
    r(_W, "log_format", given["log_format"], "console", "Shoal's logs are plain lines",
      "leave log_format out")
    r(_W, "interactive_mode", bool(given["interactive_mode"]), False, "Shoal's tasks run "
      "from their file, in their own processes", "put the tasks in a .py file")
    r(_W, "cache_lookup_scope", given["cache_lookup_scope"], "global", "a store has one "
      "cache", "use a separate store (raw_data_path=) for a separate cache")
