"""Shoal: run ML pretraining pipelines — data, clustered training and a driver — as one run.

The public surface is this module, `shoal.clustered` and `shoal.errors`; everything under an
underscore is private. ``import shoal`` stays light: no torch, jax, kubernetes or web stack.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from shoal import errors, io, report
from shoal._api.accelerators import AMD_GPU, GPU, HABANA_GAUDI, TPU, Device, Neuron
from shoal._api.cache import Cache
from shoal._api.checkpoint import latest_checkpoint
from shoal._api.custom_context import custom_context, get_custom_context
from shoal._api.environment import TaskEnvironment
from shoal._api.group import group
from shoal._api.image import Image
from shoal._api.io import Dir, File
from shoal._api.logger import logger
from shoal._api.map import map
from shoal._api.metrics import log_metrics
from shoal._api.pod_template import PodTemplate
from shoal._api.profile import profile_region
from shoal._api.resources import Resources
from shoal._api.reuse import ReusePolicy
from shoal._api.secret import Secret
from shoal._api.task import TaskTemplate
from shoal._api.task_options import Backoff, RetryStrategy, Timeout
from shoal._api.trace import trace
from shoal._driver.handle import Run, run
from shoal._driver.initialize import init, init_from_config
from shoal._driver.runcontext import with_runcontext
from shoal._runtime.context import TaskContext, ctx
from shoal._spec.profile import Profile
from shoal._spec.secret_names import NotSecret

if TYPE_CHECKING:
    from shoal._storage.checkpoints import Checkpoint

__version__ = "0.1.0"

__all__ = [
    "AMD_GPU",
    "GPU",
    "HABANA_GAUDI",
    "TPU",
    "Backoff",
    "Cache",
    "Checkpoint",
    "Device",
    "Dir",
    "File",
    "Image",
    "Neuron",
    "NotSecret",
    "PodTemplate",
    "Profile",
    "Resources",
    "RetryStrategy",
    "ReusePolicy",
    "Run",
    "Secret",
    "TaskContext",
    "TaskEnvironment",
    "TaskTemplate",
    "Timeout",
    "__version__",
    "ctx",
    "custom_context",
    "errors",
    "get_custom_context",
    "group",
    "init",
    "init_from_config",
    "io",
    "latest_checkpoint",
    "log_metrics",
    "logger",
    "map",
    "profile_region",
    "report",
    "run",
    "trace",
    "with_runcontext",
]


def __getattr__(name: str) -> Any:
    # `shoal.Checkpoint` (the type of ctx().checkpoint, for annotations) is imported on first
    # use: the checkpoint machinery is a tenth of `import shoal`'s time, and most code never
    # names it.
    if name == "Checkpoint":
        from shoal._storage.checkpoints import Checkpoint

        return Checkpoint
    raise AttributeError(f"module 'shoal' has no attribute {name!r}")
