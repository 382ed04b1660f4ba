"""The W&B run of the running task, and what reads W&B's cloud (the download helpers).

`get_wandb_run` is the run ``@wandb_init`` opened for this task (this rank of it), or
``wandb.run`` when there is none (a sweep objective run by ``wandb.agent`` in its own thread),
else None. The download helpers read a run's files and history back from the W&B cloud
(``wandb.Api``); an offline run has none there, so in offline mode (``WANDB_MODE=offline``,
``mode="offline"``) they refuse in one line and say where the run's files are instead.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import sys
from collections.abc import Mapping
from typing import Any

import shoal
from shoal.errors import SpecError
from shoal.plugins.wandb.config import get_wandb_context
from shoal.plugins.wandb.topology import distributed_info

__all__ = ["current_run", "download_wandb_run_dir", "download_wandb_run_logs",
           "download_wandb_sweep_dirs", "download_wandb_sweep_logs", "get_distributed_info",
           "get_wandb_run", "get_wandb_run_dir", "get_wandb_sweep_id", "is_offline",
           "wandb_module"]

_log = logging.getLogger("shoal.plugins.wandb")
# The run @wandb_init opened around the running body (set by shoal._plugins.wandb).
current_run: contextvars.ContextVar[Any] = contextvars.ContextVar("shoal_wandb_run",
                                                                  default=None)
DOWNLOADS = "/tmp/wandb_runs"  # Flyte's default download folder


def get_wandb_run() -> Any:
    """The ``wandb`` run of this task call (this rank), or None: outside a ``@wandb_init``
    task, and on the ranks of a gang that do not log (``run_mode="auto"``)."""
    run = current_run.get()
    if run is not None:
        return run
    wandb = sys.modules.get("wandb")  # no run was ever started when wandb is not imported
    return None if wandb is None else wandb.run


def get_wandb_run_dir() -> str | None:
    """The local folder of the current run's files (``run.dir``), or None without a run."""
    run = get_wandb_run()
    return None if run is None else str(run.dir)


def get_wandb_sweep_id() -> str | None:
    """The id of the sweep ``@wandb_sweep`` created (or joined) for this task, or None."""
    return shoal.get_custom_context().get("_wandb_sweep_id")


def get_distributed_info() -> dict[str, int] | None:
    """This rank's place in its gang (rank, local_rank, world_size, local_world_size,
    worker_index, num_workers), or None outside a gang of several processes."""
    return distributed_info()


def wandb_module() -> Any:
    """The ``wandb`` package, imported on first use (never when ``shoal.plugins.wandb`` is
    imported or a task decorated), or a `SpecError` saying how to install it."""
    try:
        import wandb
    except ModuleNotFoundError as e:
        raise SpecError("shoal.plugins.wandb", "wandb", "needs the wandb package, which is "
                        "not installed in the Python that runs the task",
                        "pip install 'shoal[wandb]' (or pip install wandb)") from e
    return wandb


def mode_of(init_kwargs: Mapping[str, Any]) -> str:
    """The mode ``wandb.init(**init_kwargs)`` would run in: its ``mode=``, its settings'
    mode, else W&B's own (``WANDB_MODE``, ``wandb offline``)."""
    mode = init_kwargs.get("mode")
    settings = init_kwargs.get("settings")
    if mode is None and isinstance(settings, Mapping):
        mode = settings.get("mode")
    elif mode is None and settings is not None and "mode" in getattr(
            settings, "model_fields_set", ()):
        mode = settings.mode
    if mode is None:
        mode = wandb_module().setup().settings.mode
    return "offline" if mode == "dryrun" else str(mode)


def is_offline(init_kwargs: Mapping[str, Any] | None = None) -> bool:
    return mode_of(init_kwargs or {}) == "offline"


READ_LOCALLY = ("read the run's files where W&B wrote them offline (get_wandb_run_dir(), or "
                "the offline-run-* folders under $WANDB_DIR/wandb), or `wandb sync` them and "
                "run online")


def refuse_offline(what: str, value: object, init_kwargs: Mapping[str, Any] | None = None,
                   fix: str = READ_LOCALLY) -> None:
    """A `SpecError` for ``what``, which needs the W&B cloud, when W&B runs offline here
    (with ``init_kwargs``: as ``wandb.init`` would with them; default: ``wandb_config``'s)."""
    if init_kwargs is None:
        config = get_wandb_context()
        init_kwargs = config.init_kwargs() if config else {}
    if is_offline(init_kwargs):
        raise SpecError(what, value, "needs the W&B cloud, and W&B is offline here "
                        "(WANDB_MODE=offline or mode='offline')", fix)


def _api_call(what: str, call: Any) -> Any:
    """One wandb.Api call, its errors translated into one line each."""
    wandb = wandb_module()

    try:
        return call(wandb.Api())
    except wandb.errors.AuthenticationError as e:
        raise SpecError(what, str(e), "W&B refused the API key",
                        "set WANDB_API_KEY (a shoal.Secret with as_env_var=\"WANDB_API_KEY\")"
                        ) from e
    except wandb.errors.CommError as e:
        raise SpecError(what, str(e), "the W&B cloud could not be reached, or has no such "
                        "run or sweep", "check the id, project and entity") from e


def download_wandb_run_dir(run_id: str | None = None, path: str | None = None,
                           include_history: bool = True) -> str:
    """Download a run's files from the W&B cloud (plus ``summary.json`` and, with
    ``include_history``, ``metrics_history.json``) into ``path`` (default
    ``/tmp/wandb_runs/<run_id>``); the run defaults to the current one. Online only."""
    refuse_offline("download_wandb_run_dir(run_id=...)", run_id)
    if run_id is None:
        run_id = shoal.get_custom_context().get("_wandb_run_id")
        run = get_wandb_run()
        run_id = run_id or (run.id if run is not None else None)
    if run_id is None:
        raise SpecError("download_wandb_run_dir(run_id=...)", None, "no run id was given and "
                        "no W&B run is open here", "pass run_id=, or call it inside a "
                        "@wandb_init task")
    config = get_wandb_context()
    where = "/".join(p for p in (config and config.entity, config and config.project) if p)
    run_path = f"{where}/{run_id}" if where else run_id
    folder = path or f"{DOWNLOADS}/{run_id}"
    os.makedirs(folder, exist_ok=True)
    api_run = _api_call(f"download_wandb_run_dir({run_path!r})", lambda api: api.run(run_path))
    for f in api_run.files():
        f.download(root=folder, replace=True)
    summary = dict(api_run.summary)
    if summary:
        with open(os.path.join(folder, "summary.json"), "w") as out:
            json.dump(summary, out, indent=2, default=str)
    if include_history:
        history = api_run.history(pandas=False)
        if history:
            with open(os.path.join(folder, "metrics_history.json"), "w") as out:
                json.dump(history, out, indent=2, default=str)
    return folder


def download_wandb_sweep_dirs(sweep_id: str | None = None, base_path: str | None = None,
                              include_history: bool = True) -> list[str]:
    """Download every run of a sweep (default: this task's) into ``base_path/<run_id>``,
    as `download_wandb_run_dir` does; the paths of those it got. Online only."""
    refuse_offline("download_wandb_sweep_dirs(sweep_id=...)", sweep_id)
    sweep_id = sweep_id or get_wandb_sweep_id()
    if sweep_id is None:
        raise SpecError("download_wandb_sweep_dirs(sweep_id=...)", None, "no sweep id was "
                        "given and none is open here", "pass sweep_id=, or call it inside a "
                        "@wandb_sweep task")
    config = get_wandb_context()
    if not config or not config.entity or not config.project:
        raise SpecError("download_wandb_sweep_dirs(sweep_id=...)", sweep_id,
                        "a sweep is found by entity/project/id, and wandb_config sets no "
                        "entity and project", 'set wandb_config(project="p", entity="e")')
    sweep_path = f"{config.entity}/{config.project}/{sweep_id}"
    sweep = _api_call(f"download_wandb_sweep_dirs({sweep_path!r})",
                      lambda api: api.sweep(sweep_path))
    paths, failed = [], []
    for run in sweep.runs:
        folder = f"{base_path or DOWNLOADS}/{run.id}"
        try:
            paths.append(download_wandb_run_dir(run.id, folder, include_history))
        except SpecError as e:
            failed.append(f"{run.id} ({e})")
    if failed and not paths:
        raise SpecError("download_wandb_sweep_dirs", sweep_id, "no run of the sweep could be "
                        "downloaded: " + ", ".join(failed), "check the runs in W&B")
    if failed:
        _log.warning("%d run(s) of sweep %s were not downloaded: %s", len(failed), sweep_id,
                     ", ".join(failed))
    return paths


@shoal.trace
async def download_wandb_run_logs(run_id: str) -> shoal.Dir:
    """A run's files, downloaded (`download_wandb_run_dir`) and uploaded to the store."""
    return await shoal.Dir.from_local(download_wandb_run_dir(run_id=run_id))


@shoal.trace
async def download_wandb_sweep_logs(sweep_id: str) -> shoal.Dir:
    """A sweep's runs' files, downloaded and uploaded to the store as one folder."""
    paths = download_wandb_sweep_dirs(sweep_id=sweep_id)
    return await shoal.Dir.from_local(os.path.dirname(paths[0]) if paths else DOWNLOADS)
