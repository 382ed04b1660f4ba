"""``@wandb_init`` and ``@wandb_sweep``: a W&B run (or sweep) around a task's body.

Written outermost, as in Flyte::

    @wandb_init(project="p", rank_scope="worker")
    @env.task
    def train() -> float: ...

Each returns the task with a scope config added (`WandbInit`, `SweepScope`; checked here, when
the decorator is applied), which every process that runs the body enters on every engine: a
plain task's worker, each rank of a gang (`shoal._plugins.wandb` makes the run). The
decorator's arguments win over the custom context's ``wandb_config``, which wins over the
defaults (``run_mode="auto"``, ``rank_scope="global"``). On a plain function (a sweep's
objective), ``@wandb_init`` opens a run around each call when no task runs in that thread
(``wandb.agent``'s), and gives the enclosing task's run otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from shoal._api.task import TaskTemplate
from shoal._api.task_scopes import scoped
from shoal.errors import SpecError
from shoal.plugins.wandb.config import (
    RANK_SCOPES,
    RUN_MODES,
    RankScope,
    RunMode,
    check_choice,
    check_init_argument,
)
from shoal.plugins.wandb.links import Wandb, WandbSweep

__all__ = ["SweepScope", "WandbInit", "wandb_init", "wandb_sweep"]

F = TypeVar("F", bound=Callable[..., Any])
SWEEP_ARGUMENTS = ("prior_runs",)  # wandb.sweep's, beside sweep, entity and project


@dataclass(frozen=True)
class WandbInit:
    """The scope ``@wandb_init`` adds: a W&B run around the body."""

    run_mode: RunMode | None = None
    rank_scope: RankScope | None = None
    download_logs: bool | None = None
    init_kwargs: Mapping[str, Any] = field(default_factory=dict)  # for wandb.init
    function: bool = False  # around a plain function, not a task


@dataclass(frozen=True)
class SweepScope:
    """The scope ``@wandb_sweep`` adds: a W&B sweep for the body (``get_wandb_sweep_id``)."""

    project: str | None = None
    entity: str | None = None
    download_logs: bool | None = None
    sweep_kwargs: Mapping[str, Any] = field(default_factory=dict)  # for wandb.sweep


def _where(name: str, project: object, entity: object, download_logs: object) -> None:
    for key, value in (("project", project), ("entity", entity)):
        if value is not None and (not isinstance(value, str) or not value):
            raise SpecError(f"@{name}({key}=...)", value, "must be a non-empty string or None",
                            f'e.g. {key}="my-{key}"')
    if download_logs is not None and not isinstance(download_logs, bool):
        raise SpecError(f"@{name}(download_logs=...)", download_logs,
                        "must be True, False or None (None: wandb_config's)",
                        "use download_logs=True")


def _not_callable(name: str, target: object) -> None:
    if not callable(target):
        raise SpecError(f"@{name}", target, "must decorate a task or a function",
                        f"write @{name} above @env.task")


def wandb_init(_func: F | None = None, *, run_mode: RunMode | None = None,
               rank_scope: RankScope | None = None, download_logs: bool | None = None,
               project: str | None = None, entity: str | None = None,
               **kwargs: Any) -> Any:
    """Open a W&B run around the task's body (each rank's, in a gang); `get_wandb_run` gives
    it, and it is finished when the body ends.

    ``run_mode``: "auto" (a new run, or the calling task's run when it has one; in a gang,
    only global rank 0 logs, or each node's local rank 0 with ``rank_scope="worker"``),
    "new" (a new run for the call; in a gang one per rank, grouped), "shared" (the calling
    task's run; in a gang every rank writes to one run, or one a node). ``kwargs``: other
    ``wandb.init`` arguments. None takes ``wandb_config``'s value, then the default."""
    check_choice("@wandb_init(run_mode=...)", run_mode, RUN_MODES, optional=True)
    check_choice("@wandb_init(rank_scope=...)", rank_scope, RANK_SCOPES, optional=True)
    _where("wandb_init", project, entity, download_logs)
    for key in kwargs:
        check_init_argument("@wandb_init", key)
    init = {**kwargs, **{k: v for k, v in (("project", project), ("entity", entity))
                          if v is not None}}

    def decorate(target: F) -> F:
        _not_callable("wandb_init", target)
        is_task = isinstance(target, TaskTemplate)
        config = WandbInit(run_mode=run_mode, rank_scope=rank_scope,
                           download_logs=download_logs, init_kwargs=init,
                           function=not is_task)
        return scoped(target, config, _run_links(target, run_mode, rank_scope, project, entity,
                                                 kwargs.get("id")) if is_task else ())

    return decorate if _func is None else decorate(_func)


def _run_links(task: Any, run_mode: RunMode | None, rank_scope: RankScope | None,
               project: str | None, entity: str | None, run_id: Any) -> tuple[str, ...]:
    """The names of the links Flyte adds: one, or one per node of a gang with
    ``rank_scope="worker"``."""
    gang = task.env.gang()
    nodes = gang.replicas if gang is not None and gang.ray is None else 1
    if nodes > 1 and rank_scope == "worker":
        return tuple(Wandb(project=project, entity=entity, run_mode=run_mode or "auto",
                           rank_scope="worker", id=run_id, _is_distributed=True,
                           _worker_index=i, name=f"Weights & Biases Worker {i}").name
                     for i in range(nodes))
    return (Wandb(project=project, entity=entity).name,)


def wandb_sweep(_func: F | None = None, *, project: str | None = None,
                entity: str | None = None, download_logs: bool | None = None,
                **kwargs: Any) -> Any:
    """Create a W&B sweep (from the custom context's ``wandb_sweep_config``) before the task's
    body runs, or join the one its caller created; `get_wandb_sweep_id` gives its id. Sweeps
    live in the W&B cloud: offline, the task refuses in one line. ``kwargs``: other
    ``wandb.sweep`` arguments (``prior_runs``)."""
    _where("wandb_sweep", project, entity, download_logs)
    for key in kwargs:
        if key not in SWEEP_ARGUMENTS:
            raise SpecError(f"@wandb_sweep({key}=...)", key, "is not an argument of "
                            "wandb.sweep", "pass project=, entity=, download_logs= or "
                            "prior_runs=; sweep settings go in wandb_sweep_config(...)")
    config = SweepScope(project=project, entity=entity, download_logs=download_logs,
                        sweep_kwargs=kwargs)

    def decorate(target: F) -> F:
        _not_callable("wandb_sweep", target)
        if not isinstance(target, TaskTemplate):
            raise SpecError("@wandb_sweep", target, "decorates tasks only (the sweep is "
                            "created when the task runs)", "write @wandb_sweep above "
                            "@env.task; a sweep's objective function takes @wandb_init")
        return scoped(target, config, (WandbSweep(project=project, entity=entity).name,))

    return decorate if _func is None else decorate(_func)
