"""Shoal: run ML pretraining pipelines — data, clustered training and a driver — as one run.

The public surface is this module, `shoal.clustered` and `shoal.errors`; everything under an
underscore is private. ``import shoal`` stays light: no torch, jax, kubernetes or web stack.
"""

from __future__ import annotations

from shoal import errors
from shoal._api.cache import Cache
from shoal._api.context import TaskContext, ctx
from shoal._api.environment import TaskEnvironment
from shoal._api.image import Image
from shoal._api.io import Dir, File
from shoal._api.map import map
from shoal._api.pod_template import PodTemplate
from shoal._api.resources import Resources
from shoal._api.task import TaskTemplate
from shoal._driver.handle import Run, init, run

__version__ = "0.1.0"

__all__ = [
    "Cache",
    "Dir",
    "File",
    "Image",
    "PodTemplate",
    "Resources",
    "Run",
    "TaskContext",
    "TaskEnvironment",
    "TaskTemplate",
    "__version__",
    "ctx",
    "errors",
    "init",
    "map",
    "run",
]
