"""The W&B sweep of a ``@wandb_sweep`` task call: created (or joined) before its body runs.

A sweep lives in the W&B cloud (its controller hands trials to ``wandb.agent``), so offline the
call refuses in one line before anything else happens. A task called by a sweep's task joins
its sweep: the id travels in the custom context (``_wandb_sweep_id``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

import shoal
from shoal._runtime.task_scopes import TaskScopePart
from shoal.errors import SpecError
from shoal.plugins.wandb.config import get_wandb_context, get_wandb_sweep_context
from shoal.plugins.wandb.decorators import SweepScope
from shoal.plugins.wandb.runs import download_wandb_sweep_dirs, refuse_offline, wandb_module

__all__ = ["SweepPart", "sweep_scope"]

_log = logging.getLogger("shoal.plugins.wandb")
ONLINE = ("run the sweep online: WANDB_MODE=online (or unset) and an API key "
          '(shoal.Secret(key="wandb_api_key", as_env_var="WANDB_API_KEY"))')


class SweepPart(TaskScopePart):
    def scope(self, config: object) -> AbstractContextManager[object]:
        assert isinstance(config, SweepScope)  # the registry found this part by its type
        return sweep_scope(config)


@contextmanager
def sweep_scope(config: SweepScope) -> Iterator[str]:
    joined = shoal.get_custom_context().get("_wandb_sweep_id")
    if joined:
        yield joined
        return
    sweep = get_wandb_sweep_context()
    if sweep is None:
        raise SpecError("@wandb_sweep", shoal.ctx().task, "creates its sweep from the custom "
                        "context's wandb_sweep_config, and none is set",
                        "run it with with_runcontext(custom_context=wandb_sweep_config("
                        "method=..., metric=..., parameters=...))")
    wb = get_wandb_context()
    refuse_offline("@wandb_sweep", shoal.ctx().task, wb.init_kwargs() if wb else {}, ONLINE)
    wandb = wandb_module()
    c = shoal.ctx()
    body = {"name": f"{c.run_name}-{c.action}", **sweep.to_sweep_config()}
    extra = {"prior_runs": sweep.prior_runs or [], **config.sweep_kwargs}
    try:
        sweep_id = wandb.sweep(sweep=body, project=config.project or sweep.project
                               or (wb.project if wb else None),
                               entity=config.entity or sweep.entity
                               or (wb.entity if wb else None), **extra)
    except (wandb.errors.UsageError, wandb.errors.CommError) as e:
        raise SpecError("wandb.sweep", body["name"], f"W&B refused: {e}", ONLINE) from e
    with shoal.custom_context(_wandb_sweep_id=sweep_id):
        yield sweep_id
    download = (config.download_logs if config.download_logs is not None
                else sweep.download_logs)
    if download:
        _log.warning("W&B sweep %s downloaded: %s", sweep_id, download_wandb_sweep_dirs(sweep_id))
