"""The engine-side parts of ``shoal.plugins.wandb``: the W&B run (`task_run`) and sweep
(`sweep`) scopes a decorated task's body runs in, registered for every engine (`NEUTRAL`):
they run in the task's own process (a worker, each rank of a gang), the same on each."""

from shoal._plugins import NEUTRAL, register
from shoal._plugins.wandb.sweep import SweepPart
from shoal._plugins.wandb.task_run import TaskRunPart
from shoal.plugins.wandb.decorators import SweepScope, WandbInit

register(WandbInit, NEUTRAL, TaskRunPart())
register(SweepScope, NEUTRAL, SweepPart())
