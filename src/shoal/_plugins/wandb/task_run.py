"""The W&B run of a ``@wandb_init`` task call, made in the process that runs its body.

In a gang, each rank places itself by Flyte's table (`shoal.plugins.wandb.topology`): a rank
that does not log gets no run (`get_wandb_run()` is None there). A plain call's run is
``{run_name}-{action}``, or its caller's run (``run_mode="auto"`` with a caller that has one,
``"shared"``), whose id reaches it in the custom context (``_wandb_run_id``). Every task call
runs in a process of its own, so a run two calls (or ranks) write to is a W&B *shared* run
(``mode="shared"``, one primary writer, the others labelled). Shared mode is a feature of the
W&B cloud: offline, each writer keeps its own offline folder under the run's id and label.

A rank that holds the task's own run also claims its metrics stream: its
``shoal.log_metrics`` points go to this run (mirrored from the metrics flusher's thread), and
``--metrics wandb``'s bridge skips the stream, so nothing reaches W&B twice. Runs opened inside
that scope (nested `task_run` calls) claim nothing: a rank the table gives no run stays with
the bridge. Every run opened here is finished when
the body ends (exit code 1 when it raised); a non-primary writer of a shared run does not
mark the run finished (``x_update_finish_state=False``).
"""

from __future__ import annotations

import contextvars
import logging
import os
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import shoal
from shoal import _contract as contract
from shoal._driver.bridges.wandb_bridge import runs_folder
from shoal._driver.bridges.wandb_process import log_points
from shoal._runtime.observe import metrics
from shoal._runtime.task_scopes import TaskScopePart
from shoal.errors import SpecError
from shoal.plugins.wandb.config import get_wandb_context
from shoal.plugins.wandb.decorators import WandbInit
from shoal.plugins.wandb.runs import (
    current_run,
    download_wandb_run_dir,
    is_offline,
    refuse_offline,
    wandb_module,
)
from shoal.plugins.wandb.topology import Topology, placement, topology

__all__ = ["TaskRunPart", "task_run"]

_log = logging.getLogger("shoal.plugins.wandb")
# True inside a task's run scope: only the outermost (the task's own) claims the rank's stream,
# so a rank the table gives no run stays with the bridge whatever runs its body opens.
_inside: contextvars.ContextVar[bool] = contextvars.ContextVar("shoal_wandb_inside",
                                                               default=False)


class TaskRunPart(TaskScopePart):
    def scope(self, config: object) -> AbstractContextManager[object]:
        assert isinstance(config, WandbInit)  # the registry found this part by its type
        return function_run(config) if config.function else task_run(config)


def init_kwargs(config: WandbInit, base: str, where: Topology | None,
                context: Any) -> tuple[dict[str, Any], bool] | None:
    """The ``wandb.init`` arguments of this call (this rank), and whether this process is the
    run's primary writer; None for a rank that does not log. ``context``: `shoal.ctx()`."""
    wb = get_wandb_context()
    run_mode = config.run_mode or (wb.run_mode if wb else "auto")
    rank_scope = config.rank_scope or (wb.rank_scope if wb else "global")
    kwargs = {**(wb.init_kwargs() if wb else {}), **config.init_kwargs}
    if where is not None:
        place = placement(run_mode, rank_scope, where, base)
        if place.run_id is None:
            return None
        if kwargs.get("id") is None:
            kwargs["id"] = place.run_id
        if place.group is not None and kwargs.get("group") is None:
            kwargs["group"] = place.group
        if run_mode == "shared":
            _share(kwargs, place.label or "", place.primary)
        return kwargs, place.primary
    parent = context.custom_context.get("_wandb_run_id")
    reuse = run_mode == "shared" or (run_mode == "auto" and bool(parent))
    if kwargs.get("id") is None:
        if reuse and not parent:
            raise SpecError("@wandb_init(run_mode=...)", run_mode, "'shared' writes to the run "
                            "of the task that called this one, and its caller has none",
                            "call it from a @wandb_init task, or use run_mode='auto' (a new "
                            "run when there is no caller's run)")
        kwargs["id"] = parent if reuse else base
    _share(kwargs, str(context.action), not reuse)
    return kwargs, not reuse


def _share(kwargs: dict[str, Any], label: str, primary: bool) -> None:
    """Make ``kwargs`` open one writer of a shared run (online: W&B's shared mode)."""
    wandb = wandb_module()
    shared: dict[str, Any] = {"x_primary": primary, "x_label": label,
                              "x_update_finish_state": primary}
    if not is_offline(kwargs):
        shared["mode"] = "shared"
    given = kwargs.get("settings")
    if isinstance(given, wandb.Settings):
        for key, value in shared.items():
            setattr(given, key, value)
    else:
        kwargs["settings"] = wandb.Settings(**{**(given or {}), **shared})


def _open(kwargs: dict[str, Any]) -> Any:
    """``wandb.init(**kwargs)``, W&B's refusals translated into one line each."""
    wandb = wandb_module()
    try:
        return wandb.init(**kwargs)
    except (wandb.errors.UsageError, wandb.errors.CommError) as e:
        raise SpecError("wandb.init", f"id={kwargs.get('id')!r}", f"W&B refused: {e}",
                        'online, give the environment secrets=shoal.Secret(key="wandb_api_key", '
                        'as_env_var="WANDB_API_KEY"); or run offline: WANDB_MODE=offline') from e


class _Mirror:
    """This call's ``shoal.log_metrics`` points into its W&B run, from the metrics flusher."""

    def __init__(self, run: Any, writer: metrics.MetricsWriter) -> None:
        self.run, self.writer = run, writer
        self.defined: set[str] = set()
        self.lock = threading.Lock()
        self.closed = False
        metrics.claim_stream(writer.path, "wandb", {"run_id": run.id})
        writer.on_flush = self

    def __call__(self, points: list[tuple[str, int, float, float]]) -> None:
        with self.lock:
            if not self.closed:
                log_points(self.run, self.defined, points)

    def close(self) -> None:
        self.writer.flush()  # what the body logged last reaches the run before it finishes
        with self.lock:
            self.closed = True
        self.writer.on_flush = None


@contextmanager
def task_run(config: WandbInit, base: str | None = None) -> Iterator[Any]:
    """The run of the running task call (this rank): `get_wandb_run()` inside, finished after.
    ``base``: the run id's base (default ``{run_name}-{action}``)."""
    c = shoal.ctx()
    where = topology(c)
    made = init_kwargs(config, base or f"{c.run_name}-{c.action}", where, c)
    wb = get_wandb_context()
    download = (config.download_logs if config.download_logs is not None
                else bool(wb and wb.download_logs))
    if download and where is not None:
        _log.warning("download_logs is not supported for a gang's tasks (as in Flyte): "
                     "the runs' files are not downloaded")
        download = False
    outermost = not _inside.get()
    inside = _inside.set(True)
    try:
        if made is None:  # this rank does not log
            token = current_run.set(None)
            try:
                yield None
            finally:
                current_run.reset(token)
            return
        yield from _opened(made[0], download, outermost, str(c.run_name))
    finally:
        _inside.reset(inside)


def _opened(kwargs: dict[str, Any], download: bool, outermost: bool,
            run_name: str) -> Iterator[Any]:
    """The body of `task_run` for a rank that logs: open, yield, finish."""
    if download:
        refuse_offline("@wandb_init(download_logs=True)", True, kwargs)
    kwargs.setdefault("reinit", "create_new")  # a warm worker may still hold an earlier run
    if "dir" not in kwargs and not os.environ.get("WANDB_DIR"):
        folder = runs_folder(contract.home(), run_name)
        folder.mkdir(parents=True, exist_ok=True)
        kwargs["dir"] = str(folder)
    run = _open(kwargs)
    writer = metrics.current()
    mirror = _Mirror(run, writer) if writer is not None and outermost else None
    token = current_run.set(run)
    failed = False
    try:
        with shoal.custom_context(_wandb_run_id=run.id):  # what a called task shares
            yield run
    except BaseException:
        failed = True
        raise
    finally:
        current_run.reset(token)
        if mirror is not None:
            mirror.close()
        run.finish(exit_code=1 if failed else 0)
    if download:
        _log.warning("W&B run %s downloaded to %s", run.id, download_wandb_run_dir(run.id))


@contextmanager
def function_run(config: WandbInit) -> Iterator[Any]:
    """``@wandb_init`` on a plain function: inside a task, the task's run; in a thread with no
    task (``wandb.agent`` runs a sweep's objective in one), a run of its own per call."""
    if shoal.ctx():
        run = current_run.get()
        if run is None:
            raise SpecError("@wandb_init", "a plain function called in a task",
                            "gives the task's W&B run, and this task has none (traces and "
                            "helpers share their task's run)",
                            "decorate the task with @wandb_init, and call get_wandb_run() in "
                            "the function")
        yield run
        return
    run = _open(dict(config.init_kwargs))
    token = current_run.set(run)
    try:
        yield run
    finally:
        current_run.reset(token)
        run.finish()
