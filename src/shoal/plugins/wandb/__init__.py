"""``shoal.plugins.wandb``: what Flyte 2 code imports as ``flyteplugins.wandb``.

``@wandb_init`` opens a Weights & Biases run around a task's body, from every rank of a gang
by Flyte's ``run_mode`` x ``rank_scope`` table (`shoal.plugins.wandb.topology`);
``get_wandb_run()`` gives it; ``wandb_config(...)`` sets W&B's settings for a run or a block
of calls through the custom context; ``@wandb_sweep`` creates a sweep (the W&B cloud only).
The API key is the environment's ``shoal.Secret(key=..., as_env_var="WANDB_API_KEY")``; in
offline mode (``WANDB_MODE=offline``) runs are written under ``$WANDB_DIR``, else under the
Shoal run's folder, and what needs the cloud (sweeps, downloads) refuses in one line. With
``shoal run --metrics wandb`` on as well, a task's own run wins: it gets that rank's
``shoal.log_metrics`` points and the bridge skips the rank (docs/observability.md).
Needs ``pip install 'shoal[wandb]'``.
"""

from shoal.plugins.wandb.config import (
    RankScope,
    RunMode,
    get_wandb_context,
    get_wandb_sweep_context,
    wandb_config,
    wandb_sweep_config,
)
from shoal.plugins.wandb.decorators import wandb_init, wandb_sweep
from shoal.plugins.wandb.links import Wandb, WandbSweep
from shoal.plugins.wandb.runs import (
    download_wandb_run_dir,
    download_wandb_run_logs,
    download_wandb_sweep_dirs,
    download_wandb_sweep_logs,
    get_distributed_info,
    get_wandb_run,
    get_wandb_run_dir,
    get_wandb_sweep_id,
)

__all__ = [
    "RankScope",
    "RunMode",
    "Wandb",
    "WandbSweep",
    "download_wandb_run_dir",
    "download_wandb_run_logs",
    "download_wandb_sweep_dirs",
    "download_wandb_sweep_logs",
    "get_distributed_info",
    "get_wandb_context",
    "get_wandb_run",
    "get_wandb_run_dir",
    "get_wandb_sweep_context",
    "get_wandb_sweep_id",
    "wandb_config",
    "wandb_init",
    "wandb_sweep",
    "wandb_sweep_config",
]
